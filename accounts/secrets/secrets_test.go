package secrets

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	gokeyring "github.com/zalando/go-keyring"
)

// Values no error message may contain.
const (
	secretAPIKey  = "sk-SUPERSECRET-apikey-0123456789"
	secretAccess  = "eyJ-SUPERSECRET-access"
	secretRefresh = "rt-SUPERSECRET-refresh"
	secretID      = "eyJ-SUPERSECRET-idtoken"
)

func sample() Secret {
	return Secret{
		APIKey:       secretAPIKey,
		AccessToken:  secretAccess,
		RefreshToken: secretRefresh,
		IDToken:      secretID,
		ExpiresAt:    time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC),
	}
}

func assertNoSecret(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	for e := err; e != nil; e = errors.Unwrap(e) {
		if strings.Contains(e.Error(), "SUPERSECRET") {
			t.Fatalf("error leaks a secret: %q", e.Error())
		}
	}
}

func equalSecret(a, b Secret) bool {
	return a.APIKey == b.APIKey && a.AccessToken == b.AccessToken &&
		a.RefreshToken == b.RefreshToken && a.IDToken == b.IDToken && a.ExpiresAt.Equal(b.ExpiresAt)
}

func openFile(t *testing.T) (Store, string) {
	t.Helper()
	dir := t.TempDir()
	st, err := Open(dir, "file", nil)
	if err != nil {
		t.Fatal(err)
	}
	return st, dir
}

// exerciseStore runs the behaviour every backend shares.
func exerciseStore(t *testing.T, st Store) {
	t.Helper()
	if _, err := st.Get("acct1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get on empty store: want ErrNotFound, got %v", err)
	}
	var e *Error
	if _, err := st.Get("acct1"); !errors.As(err, &e) || e.Code != CodeSecretNotFound {
		t.Fatalf("Get on empty store: want *Error with %s, got %#v", CodeSecretNotFound, err)
	}
	if ids, err := st.IDs(); err != nil || len(ids) != 0 {
		t.Fatalf("IDs on empty store = %v, %v", ids, err)
	}
	want := sample()
	if err := st.Set("acct1", want); err != nil {
		t.Fatal(err)
	}
	got, err := st.Get("acct1")
	if err != nil {
		t.Fatal(err)
	}
	if !equalSecret(got, want) {
		t.Fatalf("round trip: got %#v, want %#v", got, want)
	}
	// Replace, with a zero expiry and only an API key.
	if err := st.Set("acct1", Secret{APIKey: "k2"}); err != nil {
		t.Fatal(err)
	}
	if got, _ := st.Get("acct1"); !equalSecret(got, Secret{APIKey: "k2"}) {
		t.Fatalf("after replace: got %#v", got)
	}
	if err := st.Set("acct0", want); err != nil {
		t.Fatal(err)
	}
	if ids, err := st.IDs(); err != nil || !slices.Equal(ids, []string{"acct0", "acct1"}) {
		t.Fatalf("IDs = %v, %v", ids, err)
	}
	if err := st.Delete("acct1"); err != nil {
		t.Fatal(err)
	}
	if err := st.Delete("acct1"); err != nil {
		t.Fatalf("deleting an absent id: %v", err)
	}
	if err := st.Delete("never-set"); err != nil {
		t.Fatalf("deleting a never-set id: %v", err)
	}
	if _, err := st.Get("acct1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Get after Delete: want ErrNotFound, got %v", err)
	}
	if ids, err := st.IDs(); err != nil || !slices.Equal(ids, []string{"acct0"}) {
		t.Fatalf("IDs after Delete = %v, %v", ids, err)
	}
	for _, bad := range []string{"", "_index", "_probe", "a\nb"} {
		err := st.Set(bad, want)
		if !errors.As(err, &e) || e.Code != CodeValidation {
			t.Fatalf("Set(%q): want %s, got %v", bad, CodeValidation, err)
		}
		assertNoSecret(t, err)
	}
}

func TestFileRoundTrip(t *testing.T) {
	st, dir := openFile(t)
	if st.Backend() != "file" {
		t.Fatalf("Backend() = %q", st.Backend())
	}
	exerciseStore(t, st)

	// The layout other tools and future versions rely on.
	b, err := os.ReadFile(filepath.Join(dir, "secrets.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Version int                       `json:"version"`
		Secrets map[string]map[string]any `json:"secrets"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Version != 1 || doc.Secrets["acct0"]["refresh_token"] != secretRefresh ||
		doc.Secrets["acct0"]["expires_at"] != "2030-01-02T03:04:05Z" {
		t.Fatalf("unexpected file layout: %s", b)
	}
	// No temp files left behind.
	if m, _ := filepath.Glob(filepath.Join(dir, ".secrets.json.tmp-*")); len(m) != 0 {
		t.Fatalf("temp files left: %v", m)
	}
}

func TestFileKeepsUnknownEntriesAndFields(t *testing.T) {
	st, dir := openFile(t)
	path := filepath.Join(dir, "secrets.json")
	in := `{"version":1,"secrets":{"other":{"api_key":"x","future_field":{"a":1}}}}`
	if err := os.WriteFile(path, []byte(in), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := st.Set("mine", Secret{APIKey: "y"}); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path)
	if !bytes.Contains(b, []byte(`"future_field"`)) {
		t.Fatalf("an untouched entry lost a field: %s", b)
	}
}

func TestFileMode0600(t *testing.T) {
	st, dir := openFile(t)
	path := filepath.Join(dir, "secrets.json")
	// A pre-existing, too-open file is replaced by a 0600 one.
	if err := os.WriteFile(path, []byte(`{"version":1,"secrets":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := st.Set("a", sample()); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, filepath.Join(dir, ".secrets.lock")} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 {
			t.Fatalf("%s has mode %v, want 0600", p, fi.Mode().Perm())
		}
	}
}

func TestFileConcurrentGoroutines(t *testing.T) {
	st, dir := openFile(t)
	const n = 40
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			id := fmt.Sprintf("g%02d", i)
			if err := st.Set(id, Secret{APIKey: id}); err != nil {
				errs <- err
				return
			}
			got, err := st.Get(id)
			if err != nil {
				errs <- err
				return
			}
			if got.APIKey != id {
				errs <- fmt.Errorf("Get(%s) = %q", id, got.APIKey)
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	ids, err := st.IDs()
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != n {
		t.Fatalf("got %d ids, want %d: %v", len(ids), n, ids)
	}
	checkValidJSON(t, dir)
}

func checkValidJSON(t *testing.T, dir string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "secrets.json"))
	if err != nil {
		t.Fatal(err)
	}
	if !json.Valid(b) {
		t.Fatalf("secrets.json is not valid JSON: %s", b)
	}
}

const (
	helperEnvDir  = "ROTOR_SECRETS_TEST_HELPER_DIR"
	helperEnvID   = "ROTOR_SECRETS_TEST_HELPER_ID"
	helperPerProc = 15
)

// TestHelperProcess is not a test: TestFileConcurrentProcesses runs the test
// binary again with the helper environment set, and each such process sets
// its own ids in the shared directory.
func TestHelperProcess(t *testing.T) {
	dir := os.Getenv(helperEnvDir)
	if dir == "" {
		t.Skip("helper process for TestFileConcurrentProcesses")
	}
	st, err := Open(dir, "file", nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	prefix := os.Getenv(helperEnvID)
	for i := range helperPerProc {
		id := prefix + "-" + strconv.Itoa(i)
		if err := st.Set(id, Secret{RefreshToken: "rt-" + id}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(3)
		}
	}
	os.Exit(0)
}

func TestFileConcurrentProcesses(t *testing.T) {
	_, dir := openFile(t)
	const procs = 6
	cmds := make([]*exec.Cmd, procs)
	outs := make([]*bytes.Buffer, procs)
	for i := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), helperEnvDir+"="+dir, helperEnvID+"=p"+strconv.Itoa(i))
		outs[i] = new(bytes.Buffer)
		cmd.Stdout, cmd.Stderr = outs[i], outs[i]
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[i] = cmd
	}
	for i, cmd := range cmds {
		if err := cmd.Wait(); err != nil {
			t.Fatalf("helper %d: %v\n%s", i, err, outs[i])
		}
	}
	st, err := Open(dir, "file", nil)
	if err != nil {
		t.Fatal(err)
	}
	ids, err := st.IDs()
	if err != nil {
		t.Fatal(err)
	}
	if len(ids) != procs*helperPerProc {
		t.Fatalf("got %d ids, want %d (lost updates): %v", len(ids), procs*helperPerProc, ids)
	}
	for i := range procs {
		for j := range helperPerProc {
			id := fmt.Sprintf("p%d-%d", i, j)
			got, err := st.Get(id)
			if err != nil || got.RefreshToken != "rt-"+id {
				t.Fatalf("Get(%s) = %#v, %v", id, got, err)
			}
		}
	}
	checkValidJSON(t, dir)
}

func TestFileCorruptNotOverwritten(t *testing.T) {
	for name, content := range map[string]string{
		"syntax":      `{"version":1,"secrets":{"a":{"api_key":"sk-SUPERSECRET` + "\n",
		"wrong type":  `{"version":1,"secrets":[1,2]}`,
		"new version": `{"version":2,"secrets":{}}`,
		"empty":       ``,
	} {
		t.Run(name, func(t *testing.T) {
			st, dir := openFile(t)
			path := filepath.Join(dir, "secrets.json")
			if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			check := func(op string, err error) {
				t.Helper()
				if err == nil {
					t.Fatalf("%s on a corrupt file succeeded", op)
				}
				var e *Error
				if !errors.As(err, &e) || e.Code != CodeStorageUnreadable || e.Path != path {
					t.Fatalf("%s: want %s naming %s, got %v", op, CodeStorageUnreadable, path, err)
				}
				if !strings.Contains(err.Error(), path) {
					t.Fatalf("%s: message does not name the file: %v", op, err)
				}
				if errors.Is(err, ErrNotFound) {
					t.Fatalf("%s: a corrupt file must not look like a missing secret", op)
				}
				assertNoSecret(t, err)
			}
			check("Set", st.Set("b", sample()))
			check("Delete", st.Delete("a"))
			_, err := st.Get("a")
			check("Get", err)
			_, err = st.IDs()
			check("IDs", err)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if string(b) != content {
				t.Fatalf("corrupt file was modified: %q", b)
			}
		})
	}
}

func TestFileCorruptEntry(t *testing.T) {
	st, dir := openFile(t)
	path := filepath.Join(dir, "secrets.json")
	if err := os.WriteFile(path, []byte(`{"version":1,"secrets":{"a":{"expires_at":"SUPERSECRET"},"b":{"api_key":"k"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := st.Get("a")
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeStorageUnreadable {
		t.Fatalf("want %s, got %v", CodeStorageUnreadable, err)
	}
	assertNoSecret(t, err)
	if got, err := st.Get("b"); err != nil || got.APIKey != "k" {
		t.Fatalf("a sound entry next to a bad one: %#v, %v", got, err)
	}
}

// memKeyring is an in-memory Keyring whose calls can be made to fail or to
// block until released.
type memKeyring struct {
	mu      sync.Mutex
	items   map[string]string
	fail    error         // returned by every call when set
	blockOn atomic.Bool   // when true, calls wait on release
	release chan struct{} // closed to let blocked calls finish
	calls   atomic.Int64
}

func newMemKeyring() *memKeyring {
	return &memKeyring{items: map[string]string{}, release: make(chan struct{})}
}

func (m *memKeyring) enter() error {
	m.calls.Add(1)
	if m.blockOn.Load() {
		<-m.release
	}
	return m.fail
}

func (m *memKeyring) Get(service, user string) (string, error) {
	if err := m.enter(); err != nil {
		return "", err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.items[service+"/"+user]
	if !ok {
		return "", ErrNotFound
	}
	return v, nil
}

func (m *memKeyring) Set(service, user, password string) error {
	if err := m.enter(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.items[service+"/"+user] = password
	return nil
}

func (m *memKeyring) Delete(service, user string) error {
	if err := m.enter(); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.items[service+"/"+user]; !ok {
		return ErrNotFound
	}
	delete(m.items, service+"/"+user)
	return nil
}

func TestKeyringBackend(t *testing.T) {
	kr := newMemKeyring()
	st, err := Open(t.TempDir(), "keyring", nil, WithKeyring(kr))
	if err != nil {
		t.Fatal(err)
	}
	if st.Backend() != "keyring" {
		t.Fatalf("Backend() = %q", st.Backend())
	}
	exerciseStore(t, st)
	// One item per account under service "rotor", a JSON object, plus the index.
	var obj map[string]any
	if err := json.Unmarshal([]byte(kr.items["rotor/acct0"]), &obj); err != nil || obj["api_key"] != secretAPIKey {
		t.Fatalf("item rotor/acct0 = %q, %v", kr.items["rotor/acct0"], err)
	}
	if kr.items["rotor/_index"] != `["acct0"]` {
		t.Fatalf("index item = %q", kr.items["rotor/_index"])
	}
}

func TestKeyringConcurrentSetKeepsIndex(t *testing.T) {
	kr := newMemKeyring()
	dir := t.TempDir()
	const n = 20
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			// Separate Stores, as separate processes would have.
			st, err := Open(dir, "keyring", nil, WithKeyring(kr))
			if err != nil {
				t.Error(err)
				return
			}
			if err := st.Set(fmt.Sprintf("k%02d", i), Secret{APIKey: "x"}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	st, _ := Open(dir, "keyring", nil, WithKeyring(kr))
	ids, err := st.IDs()
	if err != nil || len(ids) != n {
		t.Fatalf("IDs = %v, %v; want %d ids", ids, err, n)
	}
}

func TestKeyringCorruptIndexNotOverwritten(t *testing.T) {
	kr := newMemKeyring()
	kr.items["rotor/_index"] = "not json"
	st, err := Open(t.TempDir(), "keyring", nil, WithKeyring(kr))
	if err != nil {
		t.Fatal(err)
	}
	err = st.Set("a", sample())
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeStorageUnreadable {
		t.Fatalf("want %s, got %v", CodeStorageUnreadable, err)
	}
	assertNoSecret(t, err)
	if kr.items["rotor/_index"] != "not json" {
		t.Fatal("corrupt index was overwritten")
	}
}

func TestGoKeyringMock(t *testing.T) {
	gokeyring.MockInit()
	st, err := Open(t.TempDir(), "", nil) // default adapter, auto mode
	if err != nil {
		t.Fatal(err)
	}
	if st.Backend() != "keyring" {
		t.Fatalf("auto with a working keyring chose %q", st.Backend())
	}
	exerciseStore(t, st)
	raw, err := gokeyring.Get("rotor", "acct0")
	if err != nil || !strings.Contains(raw, secretRefresh) {
		t.Fatalf("go-keyring item rotor/acct0 = %q, %v", raw, err)
	}
}

func TestGoKeyringErrorIsReported(t *testing.T) {
	gokeyring.MockInitWithError(errors.New("dbus: connection refused"))
	t.Cleanup(gokeyring.MockInit)
	if _, err := Open(t.TempDir(), "keyring", nil); err == nil {
		t.Fatal("keyring mode with a failing keyring succeeded")
	}
}

func TestKeyringTimeout(t *testing.T) {
	kr := newMemKeyring()
	t.Cleanup(func() { close(kr.release) })
	st, err := Open(t.TempDir(), "keyring", nil, WithKeyring(kr), WithTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Set("a", sample()); err != nil {
		t.Fatal(err)
	}
	before := kr.calls.Load()
	kr.blockOn.Store(true)

	for i := range 3 { // the first call hangs in the keyring; the next ones find the slot taken
		start := time.Now()
		_, err := st.Get("a")
		if elapsed := time.Since(start); elapsed > 2*time.Second {
			t.Fatalf("call %d took %v", i, elapsed)
		}
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("call %d: want ErrTimeout, got %v", i, err)
		}
		var e *Error
		if !errors.As(err, &e) || e.Code != CodeKeyringUnavailable || !e.Retryable {
			t.Fatalf("call %d: want retryable %s, got %#v", i, CodeKeyringUnavailable, err)
		}
	}
	start := time.Now()
	if err := st.Set("a", sample()); !errors.Is(err, ErrTimeout) || time.Since(start) > 2*time.Second {
		t.Fatalf("Set on a stuck keyring: %v after %v", err, time.Since(start))
	}
	// Only one goroutine ever entered the stuck keyring.
	if c := kr.calls.Load() - before; c != 1 {
		t.Fatalf("a stuck keyring was entered %d times, want 1", c)
	}
}

func TestKeyringRecoversAfterTimeout(t *testing.T) {
	kr := newMemKeyring()
	st, err := Open(t.TempDir(), "keyring", nil, WithKeyring(kr), WithTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	kr.blockOn.Store(true)
	if _, err := st.Get("a"); !errors.Is(err, ErrTimeout) {
		t.Fatalf("want ErrTimeout, got %v", err)
	}
	kr.blockOn.Store(false)
	close(kr.release)
	deadline := time.Now().Add(2 * time.Second)
	for {
		_, err := st.Get("a")
		if errors.Is(err, ErrNotFound) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("store did not recover: %v", err)
		}
	}
}

func TestOpenAutoFallsBack(t *testing.T) {
	failing := newMemKeyring()
	failing.fail = errors.New("org.freedesktop.DBus.Error.ServiceUnknown:\nno secret service")
	blocking := newMemKeyring()
	blocking.blockOn.Store(true)
	t.Cleanup(func() { close(blocking.release) })

	for name, kr := range map[string]*memKeyring{"error": failing, "timeout": blocking} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			var warn bytes.Buffer
			start := time.Now()
			st, err := Open(dir, "auto", &warn, WithKeyring(kr), WithTimeout(100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			if time.Since(start) > 2*time.Second {
				t.Fatalf("Open took %v", time.Since(start))
			}
			if st.Backend() != "file" {
				t.Fatalf("Backend() = %q, want file", st.Backend())
			}
			w := warn.String()
			if strings.Count(w, "\n") != 1 || !strings.HasSuffix(w, "\n") {
				t.Fatalf("want exactly one warning line, got %q", w)
			}
			if !strings.Contains(w, filepath.Join(dir, "secrets.json")) || !strings.Contains(w, "0600") {
				t.Fatalf("warning does not name the file: %q", w)
			}
			if err := st.Set("a", sample()); err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(filepath.Join(dir, "secrets.json")); err != nil {
				t.Fatal(err)
			}
			if warn.String() != w {
				t.Fatal("the store warned again after Open")
			}
			// Explicit keyring mode reports the failure instead.
			if _, err := Open(dir, "keyring", nil, WithKeyring(kr), WithTimeout(100*time.Millisecond)); err == nil {
				t.Fatal("keyring mode with a dead keyring succeeded")
			}
		})
	}
}

func TestOpenModes(t *testing.T) {
	dir := t.TempDir()
	kr := newMemKeyring()
	for mode, want := range map[string]string{"": "keyring", "auto": "keyring", "keyring": "keyring", "file": "file"} {
		var warn bytes.Buffer
		st, err := Open(dir, mode, &warn, WithKeyring(kr))
		if err != nil {
			t.Fatalf("mode %q: %v", mode, err)
		}
		if st.Backend() != want {
			t.Fatalf("mode %q: Backend() = %q, want %q", mode, st.Backend(), want)
		}
		if warn.Len() != 0 {
			t.Fatalf("mode %q warned: %q", mode, warn.String())
		}
	}
	// file mode never touches the keyring.
	before := kr.calls.Load()
	if _, err := Open(dir, "file", nil, WithKeyring(kr)); err != nil || kr.calls.Load() != before {
		t.Fatalf("file mode called the keyring (err %v)", err)
	}
	_, err := Open(dir, "vault", nil, WithKeyring(kr))
	var e *Error
	if !errors.As(err, &e) || e.Code != CodeValidation {
		t.Fatalf("unknown mode: want %s, got %v", CodeValidation, err)
	}
	for _, s := range []string{`"vault"`, "auto", "keyring", "file"} {
		if !strings.Contains(err.Error(), s) {
			t.Fatalf("unknown-mode error %q lacks %s", err, s)
		}
	}
}

func TestSecretFormattingIsRedacted(t *testing.T) {
	s := sample()
	for _, out := range []string{fmt.Sprint(s), fmt.Sprintf("%v %+v %#v %s", s, s, s, s), fmt.Sprintf("%v", &s)} {
		if strings.Contains(out, "SUPERSECRET") {
			t.Fatalf("formatting leaks a secret: %s", out)
		}
	}
	if !strings.Contains(s.String(), "refresh_token:set") || !strings.Contains(Secret{}.String(), "api_key:unset") {
		t.Fatalf("String() = %s", s.String())
	}
}

// Once secrets are in secrets.json, auto mode keeps using the file even
// when a keyring answers later: otherwise every stored secret would vanish.
func TestAutoKeepsExistingFile(t *testing.T) {
	dir := t.TempDir()
	fs, err := Open(dir, ModeFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := fs.Set("acct_1", Secret{APIKey: "k"}); err != nil {
		t.Fatal(err)
	}
	var warn strings.Builder
	st, err := Open(dir, ModeAuto, &warn, WithKeyring(newMemKeyring()))
	if err != nil {
		t.Fatal(err)
	}
	if st.Backend() != BackendFile {
		t.Fatalf("auto picked %s with secrets.json present", st.Backend())
	}
	if got, err := st.Get("acct_1"); err != nil || got.APIKey != "k" {
		t.Fatalf("Get = %v, %v", got, err)
	}
	if warn.Len() != 0 {
		t.Fatalf("unexpected warning: %q", warn.String())
	}
}
