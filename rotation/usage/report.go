package usage

import "time"

// Window is a span of time, ending now, that a usage summary covers.
type Window struct {
	Name string
	Span time.Duration
}

// ReportWindows are the windows `rotor report` summarizes (docs/commands.md).
var ReportWindows = []Window{
	{Name: "1h", Span: time.Hour},
	{Name: "24h", Span: 24 * time.Hour},
	{Name: "7d", Span: 7 * 24 * time.Hour},
}

// Counts is what a set of usage records adds up to.
type Counts struct {
	Requests int64
	// Errors counts the records with an error code (see Record.ErrorCode),
	// and ErrorsByCode splits them by that code.
	Errors       int64
	ErrorsByCode map[string]int64
	ByStatus     map[int]int64
	Tokens       Tokens
	// AffinityKept and AffinityMoved count the requests session affinity
	// kept on their conversation's account and those it had to move.
	AffinityKept  int64
	AffinityMoved int64
	// CreditsRequests and CreditsTokens are the requests served on
	// credits, past a full window's included quota, and their tokens
	// (docs/selection.md).
	CreditsRequests int64
	CreditsTokens   Tokens
	// FastRequests counts the requests that asked for the priority
	// service tier (Codex's Fast), FlexRequests those that asked for flex.
	FastRequests int64
	FlexRequests int64
}

// Service tiers a usage record may name (Record.Tier).
const (
	TierFast = "priority"
	TierFlex = "flex"
)

func (c *Counts) add(u *Record) {
	c.Requests++
	if c.ByStatus == nil {
		c.ByStatus = make(map[int]int64)
	}
	c.ByStatus[u.Status]++
	if code := u.ErrorCode(); code != "" {
		c.Errors++
		if c.ErrorsByCode == nil {
			c.ErrorsByCode = make(map[string]int64)
		}
		c.ErrorsByCode[code]++
	}
	if u.Tokens != nil {
		c.Tokens.Add(*u.Tokens)
	}
	if u.Credits {
		c.CreditsRequests++
		if u.Tokens != nil {
			c.CreditsTokens.Add(*u.Tokens)
		}
	}
	switch u.Tier {
	case TierFast:
		c.FastRequests++
	case TierFlex:
		c.FlexRequests++
	}
	switch u.Affinity {
	case AffinityKept:
		c.AffinityKept++
	case AffinityMoved:
		c.AffinityMoved++
	}
}

// Summary adds up the records of one window, in total, per account id
// and per model ("" for records without one).
type Summary struct {
	Window    Window
	Since     time.Time
	Total     Counts
	ByAccount map[string]*Counts
	ByModel   map[string]*Counts
	// Tokens are the tokens of the window's records per account and
	// model: what a price table prices (docs/cost.md), since a price is a
	// model's and what it means depends on the account's kind.
	Tokens map[AccountModel]*Tokens
}

// AccountModel names the records of one account id and one model.
type AccountModel struct {
	AccountID, Model string
}

func (s *Summary) add(u *Record) {
	s.Total.add(u)
	if u.Tokens != nil {
		k := AccountModel{u.AccountID, u.Model}
		t := s.Tokens[k]
		if t == nil {
			t = &Tokens{}
			s.Tokens[k] = t
		}
		t.Add(*u.Tokens)
	}
	for _, kv := range []struct {
		m   map[string]*Counts
		key string
	}{{s.ByAccount, u.AccountID}, {s.ByModel, u.Model}} {
		c := kv.m[kv.key]
		if c == nil {
			c = &Counts{}
			kv.m[kv.key] = c
		}
		c.add(u)
	}
}

// Report is the usage log summarized over several windows.
type Report struct {
	Windows []Summary
	// Oldest is the time of the oldest record still on disk (zero when the
	// log is empty): windows reaching further back than it are incomplete,
	// because rotation dropped what came before.
	Oldest time.Time
	// Records is how many records were read, Skipped how many lines were
	// not records.
	Records int64
	Skipped int64
}

// Summarize reads dir's usage log once and adds up the records of each
// window ending at now. Records from the future (a clock that moved back)
// count in every window.
func Summarize(dir string, now time.Time, windows []Window) (Report, error) {
	rep := Report{Windows: make([]Summary, len(windows))}
	for i, w := range windows {
		rep.Windows[i] = Summary{Window: w, Since: now.Add(-w.Span),
			ByAccount: map[string]*Counts{}, ByModel: map[string]*Counts{}, Tokens: map[AccountModel]*Tokens{}}
	}
	skipped, err := Read(dir, func(u Record) {
		rep.Records++
		if rep.Oldest.IsZero() || u.Time.Before(rep.Oldest) {
			rep.Oldest = u.Time
		}
		for i := range rep.Windows {
			if !u.Time.Before(rep.Windows[i].Since) {
				rep.Windows[i].add(&u)
			}
		}
	})
	rep.Skipped = int64(skipped)
	return rep, err
}
