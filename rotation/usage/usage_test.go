package usage

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts/home"
)

func usageRec(at time.Time, acct, model string, status int, code string, tok *Tokens) Record {
	return Record{Time: at, RequestID: fmt.Sprintf("req-%d", at.UnixNano()), AccountID: acct, Model: model,
		Status: status, Code: code, Tokens: tok, DurMS: 10}
}

func TestUsageSummaryWindows(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	tok := &Tokens{Input: 100, Cached: 40, Output: 10, Reasoning: 5, Total: 110}
	for _, r := range []Record{
		usageRec(now.Add(-30*time.Minute), "a1", "gpt-5", 200, "", tok),
		usageRec(now.Add(-40*time.Minute), "a2", "gpt-5-mini", 200, "stream_interrupted", nil),
		usageRec(now.Add(-2*time.Hour), "a1", "gpt-5", 500, "", nil),
		usageRec(now.Add(-3*24*time.Hour), "a2", "gpt-5", 200, "", tok),
		usageRec(now.Add(-8*24*time.Hour), "a1", "gpt-5", 200, "", tok), // outside every window
	} {
		log.Append(r)
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	log.Append(usageRec(now, "a1", "gpt-5", 200, "", nil)) // after Close: dropped, no panic

	rep, err := Summarize(dir, now, ReportWindows)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Records != 5 || rep.Skipped != 0 || !rep.Oldest.Equal(now.Add(-8*24*time.Hour)) {
		t.Errorf("records %d skipped %d oldest %v", rep.Records, rep.Skipped, rep.Oldest)
	}
	wantReq := map[string]int64{"1h": 2, "24h": 3, "7d": 4}
	for _, w := range rep.Windows {
		if w.Total.Requests != wantReq[w.Window.Name] {
			t.Errorf("%s: %d requests, want %d", w.Window.Name, w.Total.Requests, wantReq[w.Window.Name])
		}
	}
	day := rep.Windows[1]
	if day.Total.Errors != 2 || day.Total.ErrorsByCode["stream_interrupted"] != 1 || day.Total.ErrorsByCode["http_500"] != 1 {
		t.Errorf("24h errors: %d %v", day.Total.Errors, day.Total.ErrorsByCode)
	}
	if day.Total.ByStatus[200] != 2 || day.Total.ByStatus[500] != 1 {
		t.Errorf("24h statuses: %v", day.Total.ByStatus)
	}
	if a1 := day.ByAccount["a1"]; a1 == nil || a1.Requests != 2 || a1.Tokens != *tok {
		t.Errorf("24h a1: %+v", a1)
	}
	if m := day.ByModel["gpt-5-mini"]; m == nil || m.Requests != 1 || m.Errors != 1 {
		t.Errorf("24h gpt-5-mini: %+v", m)
	}
	week := rep.Windows[2]
	if week.ByAccount["a2"].Tokens.Input != 100 || week.Total.Tokens.Cached != 80 || week.Total.Tokens.Reasoning != 10 {
		t.Errorf("7d tokens: %+v / %+v", week.ByAccount["a2"].Tokens, week.Total.Tokens)
	}
	// Tokens per account and model, what prices apply to (docs/cost.md): only
	// records with tokens.
	if len(week.Tokens) != 2 || *week.Tokens[AccountModel{"a1", "gpt-5"}] != *tok || *week.Tokens[AccountModel{"a2", "gpt-5"}] != *tok {
		t.Errorf("7d tokens by account and model: %v", week.Tokens)
	}
}

func TestUsageSkipsDamagedLines(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Now().UTC()
	good, _ := json.Marshal(usageRec(now, "a1", "m", 200, "", nil))
	content := string(good) + "\n" + "not json\n" + "\n" + `{"account_id":"no time"}` + "\n" + string(good[:20]) // cut short by kill -9
	if err := os.WriteFile(filepath.Join(dir, home.UsageFile), []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	rep, err := Summarize(dir, now.Add(time.Second), ReportWindows)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Records != 1 || rep.Skipped != 3 {
		t.Errorf("records %d skipped %d, want 1 and 3", rep.Records, rep.Skipped)
	}
	// A missing log is empty, not an error.
	if rep, err := Summarize(t.TempDir(), now, ReportWindows); err != nil || rep.Records != 0 {
		t.Errorf("missing log: %+v %v", rep, err)
	}
}

// A line left without its newline (a writer killed mid-write) never
// swallows the next record: the next writer ends it first.
func TestUsageTornLastLineDoesNotSwallowTheNext(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Now().UTC()
	good, _ := json.Marshal(usageRec(now, "a1", "m", 200, "", nil))
	if err := os.WriteFile(filepath.Join(dir, home.UsageFile), append(append(good, '\n'), good[:25]...), 0o600); err != nil {
		t.Fatal(err)
	}
	log, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	log.Append(usageRec(now, "a2", "m", 200, "", nil))
	log.Append(usageRec(now, "a3", "m", 200, "", nil))
	log.Close()
	var ids []string
	skipped, err := Read(dir, func(u Record) { ids = append(ids, u.AccountID) })
	if err != nil || skipped != 1 || strings.Join(ids, ",") != "a1,a2,a3" {
		t.Errorf("records %v, skipped %d (%v); want a1,a2,a3 and the torn line skipped", ids, skipped, err)
	}
}

// usageLines reads every line of a file and checks each is a record.
func usageLines(t *testing.T, path string) []Record {
	t.Helper()
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []Record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			// A writer that saw another process's line half-copied (its
			// last byte not yet a newline) ends that "torn" line first:
			// an empty line, which readers skip. Records are never glued.
			continue
		}
		var u Record
		if err := json.Unmarshal(sc.Bytes(), &u); err != nil {
			t.Fatalf("%s: torn or interleaved line %q", filepath.Base(path), sc.Text())
		}
		out = append(out, u)
	}
	return out
}

func TestUsageRotatesAtSizeKeepingOneOldFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	const max = 4096
	log, err := OpenWith(dir, Options{MaxBytes: max})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	now := time.Now().UTC()
	const n = 300 // ~60 KiB of records: many rotations
	for i := range n {
		log.Append(usageRec(now.Add(time.Duration(i)*time.Millisecond), "a1", "m", 200, "", nil))
	}
	log.Flush()
	cur, old := filepath.Join(dir, home.UsageFile), filepath.Join(dir, home.UsageOldFile)
	for _, p := range []string{cur, old} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatalf("%s: %v", p, err)
		}
		if fi.Size() >= max+512 {
			t.Errorf("%s is %d bytes, want about %d at most", filepath.Base(p), fi.Size(), max)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v", filepath.Base(p), fi.Mode().Perm())
		}
	}
	if m, _ := filepath.Glob(filepath.Join(dir, home.UsageFile+".*")); len(m) != 1 {
		t.Errorf("rotated files: %v, want exactly one", m)
	}
	// The newest records survive, in order, across the two files.
	all := append(usageLines(t, old), usageLines(t, cur)...)
	if len(all) == 0 || !all[len(all)-1].Time.Equal(now.Add((n-1)*time.Millisecond)) {
		t.Fatalf("last record lost: %d records", len(all))
	}
	for i := 1; i < len(all); i++ {
		if !all[i].Time.After(all[i-1].Time) {
			t.Fatalf("records out of order at %d", i)
		}
	}
}

// TestUsageFollowsRotationByAnotherWriter plays two rotor processes: B
// keeps an O_APPEND descriptor on the file A rotates away, and must move to
// the new file on its next look at the path.
func TestUsageFollowsRotationByAnotherWriter(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, err := OpenWith(dir, Options{MaxBytes: 1024, CheckEvery: 1 << 20, CheckInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := OpenWith(dir, Options{MaxBytes: 1 << 20, CheckEvery: 1, CheckInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	now := time.Now().UTC()
	b.Append(usageRec(now, "b", "m", 200, "", nil))
	b.Flush()
	for i := 0; i < 20 && fileMissing(filepath.Join(dir, home.UsageOldFile)); i++ {
		a.Append(usageRec(now, "a", "m", 200, "", nil))
		a.Flush()
	}
	if fileMissing(filepath.Join(dir, home.UsageOldFile)) {
		t.Fatal("A never rotated")
	}
	// B looks at the path before its next append (CheckEvery 1).
	b.Append(usageRec(now, "b-after", "m", 200, "", nil))
	b.Flush()
	found := false
	for _, u := range usageLines(t, filepath.Join(dir, home.UsageFile)) {
		found = found || u.AccountID == "b-after"
	}
	if !found {
		t.Error("B kept writing to the rotated-out file")
	}

	// The file removed by hand: the next look recreates it.
	os.Remove(filepath.Join(dir, home.UsageFile))
	b.Append(usageRec(now, "b1", "m", 200, "", nil))
	b.Flush()
	b.Append(usageRec(now, "b2", "m", 200, "", nil))
	b.Flush()
	if fileMissing(filepath.Join(dir, home.UsageFile)) {
		t.Error("the log was not recreated after its file was removed")
	}
}

func fileMissing(p string) bool {
	_, err := os.Stat(p)
	return err != nil
}

// TestUsageConcurrentWritersRotate runs several logs (processes) with
// several goroutines each, rotating often: no line may be torn and every
// file stays bounded.
func TestUsageConcurrentWritersRotate(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var wg sync.WaitGroup
	now := time.Now().UTC()
	var logs []*Log
	for w := range 3 {
		log, err := OpenWith(dir, Options{MaxBytes: 8 << 10, CheckEvery: 4})
		if err != nil {
			t.Fatal(err)
		}
		defer log.Close()
		logs = append(logs, log)
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 150 {
					log.Append(usageRec(now, fmt.Sprintf("w%d-g%d", w, g), "m", 200, "", &Tokens{Input: int64(i)}))
				}
			}()
		}
	}
	wg.Wait()
	for _, log := range logs {
		log.Flush()
	}
	usageLines(t, filepath.Join(dir, home.UsageFile))
	usageLines(t, filepath.Join(dir, home.UsageOldFile))
	rep, err := Summarize(dir, now.Add(time.Second), ReportWindows)
	if err != nil || rep.Skipped != 0 || rep.Records == 0 {
		t.Errorf("records %d skipped %d err %v", rep.Records, rep.Skipped, err)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, home.UsageFile+"*")); len(m) != 2 {
		t.Errorf("files %v, want usage.jsonl and usage.jsonl.1", m)
	}
}

// Every line of usage.jsonl is what encoding/json would write for its
// record, byte for byte: readers and other tools parse it as such.
func TestUsageLineIsEncodingJSONs(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 24, 22, 10, 35, 123456789, time.UTC)
	recs := []Record{
		usageRec(at, "a1", "gpt-5", 200, "", &Tokens{Input: 1000, Cached: 5, Output: 100, Reasoning: 7, Total: 1100}),
		usageRec(at.Truncate(time.Second), "a2", "", 429, "usage_limit_reached", nil),
		{Time: at, RequestID: "rotor_x", AccountID: "a3", Status: 499, Code: "client_closed", TTFBMS: 12, DurMS: 0},
		{Time: at, Tokens: &Tokens{Input: -1}},
		{Time: at, AccountID: "a4", Status: 200, DurMS: 3, Affinity: AffinityMoved},
		{Time: at, AccountID: "a5", Status: 200, DurMS: 3, Context: ContextCut},
		{Time: at, AccountID: "a6", Status: 200, DurMS: 3, Credits: true, Limit: "codex_bengalfox", Tier: "priority"},
	}
	for _, model := range []string{`gpt-5 "quoted" \ back`, "<script>&", "tab\there\nline\x00\x1f\x7f", "ünïcödé ✓", "bad \xff\xfe utf-8", "\u2028\u2029"} {
		recs = append(recs, usageRec(at, model, model, 200, model, nil))
	}
	for _, rec := range recs {
		want, err := json.Marshal(rec)
		if err != nil {
			t.Fatal(err)
		}
		if got := rec.AppendJSON([]byte("prefix")); string(got) != "prefix"+string(want) {
			t.Errorf("AppendJSON:\n got %s\nwant prefix%s", got, want)
		}
	}
}

func FuzzUsageLine(f *testing.F) {
	f.Add("gpt-5", "usage_limit_reached", int64(3))
	f.Add("<\"\\\u2028\xff>", "", int64(-1))
	f.Fuzz(func(t *testing.T, model, code string, n int64) {
		rec := Record{Time: time.Unix(0, n).UTC(), RequestID: model + code, AccountID: code, Model: model,
			Status: int(n % 600), Code: code, Tokens: &Tokens{Input: n, Total: -n}, TTFBMS: n % 3, DurMS: n}
		want, err := json.Marshal(rec)
		if err != nil {
			t.Skip() // a time encoding/json refuses (year past 9999)
		}
		if got := rec.AppendJSON(nil); string(got) != string(want) {
			t.Errorf("AppendJSON:\n got %s\nwant %s", got, want)
		}
	})
}

func BenchmarkUsageAppend(b *testing.B) {
	log, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer log.Close()
	rec := usageRec(time.Now(), "a1", "gpt-5", 200, "", &Tokens{Input: 1000, Output: 100})
	b.ReportAllocs()
	for b.Loop() {
		log.Append(rec)
	}
}

// A Tail delivers each record once: what was appended since the last
// Read, never a line still being written, and everything again (after a
// reset) once the log rotates.
func TestUsageTail(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tail := NewTail(dir)
	defer tail.Close()
	var got []string
	resets := 0
	read := func() {
		t.Helper()
		if err := tail.Read(func() { resets++; got = nil }, func(u Record) { got = append(got, u.RequestID) }); err != nil {
			t.Fatal(err)
		}
	}
	read() // no log yet
	if resets != 0 || len(got) != 0 {
		t.Fatalf("empty home: %d resets, %v", resets, got)
	}
	log, err := OpenWith(dir, Options{MaxBytes: 600, CheckEvery: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	rec := func(id string) Record { return Record{Time: time.Now(), RequestID: id, AccountID: "a", Status: 200} }
	log.Append(rec("r1"))
	log.Append(rec("r2"))
	log.Flush()
	read()
	if resets != 1 || strings.Join(got, ",") != "r1,r2" {
		t.Fatalf("first read: %d resets, %v", resets, got)
	}
	// A line being written is left for later, then read whole.
	f, err := os.OpenFile(filepath.Join(dir, home.UsageFile), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	line, _ := json.Marshal(rec("r3"))
	f.Write(line[:10])
	read()
	if strings.Join(got, ",") != "r1,r2" {
		t.Fatalf("a half-written line was read: %v", got)
	}
	f.Write(append(line[10:], '\n'))
	f.Close()
	read()
	if strings.Join(got, ",") != "r1,r2,r3" || resets != 1 {
		t.Fatalf("after the line was finished: %d resets, %v", resets, got)
	}
	read()
	if len(got) != 3 {
		t.Fatalf("a record was delivered twice: %v", got)
	}
	// Past MaxBytes the log rotates: the tail finishes the old file and
	// follows the new one, with no reset and nothing delivered twice.
	var want []string
	want = append(want, got...)
	for i := 4; i < 40; i++ {
		id := fmt.Sprintf("r%d", i)
		want = append(want, id)
		log.Append(rec(id))
		log.Flush()
		read()
	}
	if _, err := os.Stat(filepath.Join(dir, home.UsageOldFile)); err != nil {
		t.Fatal("the log never rotated")
	}
	if resets != 1 || strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("across rotations: %d resets\n got %v\nwant %v", resets, got, want)
	}
	// Two rotations between Reads: the file followed is gone, so the tail
	// starts over from what the log still holds, and says so.
	for i := 40; i < 60; i++ {
		log.Append(rec(fmt.Sprintf("r%d", i)))
	}
	log.Flush()
	read()
	if resets != 2 || got[len(got)-1] != "r59" {
		t.Fatalf("after two rotations: %d resets, %v", resets, got)
	}
}

// Append does not wait for the disk: a record reaches the file within
// FlushAfter on its own, at once on Flush, and the queue never grows past
// batchMax before it is written.
func TestUsageAppendWritesBehind(t *testing.T) {
	t.Parallel()
	now := time.Now().UTC()
	count := func(dir string) int {
		n := 0
		Read(dir, func(Record) { n++ })
		return n
	}

	dir := t.TempDir()
	log, err := OpenWith(dir, Options{FlushAfter: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	log.Append(usageRec(now, "a1", "m", 200, "", nil))
	if n := count(dir); n != 0 {
		t.Fatalf("%d records written before their flush", n)
	}
	log.Flush()
	if n := count(dir); n != 1 {
		t.Fatalf("%d records after Flush, want 1", n)
	}
	line, _ := json.Marshal(usageRec(now, "a1", "m", 200, "", nil))
	full := batchMax/(len(line)+1) + 1
	for range full {
		log.Append(usageRec(now, "a1", "m", 200, "", nil))
	}
	if n := count(dir); n != 1+full {
		t.Fatalf("%d records after a full queue, want %d: the queue must be written once it holds %d bytes", n, 1+full, batchMax)
	}

	dir = t.TempDir()
	soon, err := OpenWith(dir, Options{FlushAfter: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer soon.Close()
	soon.Append(usageRec(now, "a1", "m", 200, "", nil))
	soon.Append(usageRec(now, "a2", "m", 200, "", nil))
	deadline := time.Now().Add(5 * time.Second)
	for count(dir) != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d records written 5 s after a 20 ms FlushAfter, want 2", count(dir))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Requests served on credits and those that asked for Fast or Flex are
// counted per account (docs/selection.md): what `rotor report` shows.
func TestUsageSummaryCreditsAndTiers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	log, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	tok := &Tokens{Input: 100, Cached: 40, Output: 10, Total: 110}
	onCredits := usageRec(now.Add(-time.Minute), "a1", "gpt-5", 200, "", tok)
	onCredits.Credits, onCredits.Tier = true, TierFast
	noTokens := usageRec(now.Add(-2*time.Minute), "a1", "gpt-5", 200, "", nil)
	noTokens.Credits = true
	flex := usageRec(now.Add(-3*time.Minute), "a2", "gpt-5", 200, "", tok)
	flex.Tier = TierFlex
	fast := usageRec(now.Add(-4*time.Minute), "a2", "gpt-5", 200, "", tok)
	fast.Tier = TierFast
	for _, r := range []Record{onCredits, noTokens, flex, fast, usageRec(now.Add(-5*time.Minute), "a2", "gpt-5", 200, "", tok)} {
		log.Append(r)
	}
	if err := log.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := Summarize(dir, now, ReportWindows)
	if err != nil {
		t.Fatal(err)
	}
	hour := rep.Windows[0]
	if a1 := hour.ByAccount["a1"]; a1.CreditsRequests != 2 || a1.CreditsTokens != *tok || a1.FastRequests != 1 || a1.FlexRequests != 0 {
		t.Errorf("a1: credits %d %+v, fast %d flex %d", a1.CreditsRequests, a1.CreditsTokens, a1.FastRequests, a1.FlexRequests)
	}
	if a2 := hour.ByAccount["a2"]; a2.CreditsRequests != 0 || a2.CreditsTokens != (Tokens{}) || a2.FastRequests != 1 || a2.FlexRequests != 1 {
		t.Errorf("a2: credits %d %+v, fast %d flex %d", a2.CreditsRequests, a2.CreditsTokens, a2.FastRequests, a2.FlexRequests)
	}
	if hour.Total.CreditsRequests != 2 || hour.Total.FastRequests != 2 || hour.Total.FlexRequests != 1 {
		t.Errorf("total: %+v", hour.Total)
	}
}
