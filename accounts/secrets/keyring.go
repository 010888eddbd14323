package secrets

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	gokeyring "github.com/zalando/go-keyring"
)

// Keyring items rotor keeps for itself next to the per-account ones. Account
// ids may not start with '_', so these never collide with one.
const (
	indexUser = "_index" // JSON array of the ids that have an item
	probeUser = "_probe" // only ever read, to learn whether the keyring answers
	saltUser  = "_fingerprint_salt"
	// clientKeyUser is the stable client key's item (clientkey.go).
	clientKeyUser = "_client_key"
)

// goKeyring is the default Keyring: go-keyring's package functions.
type goKeyring struct{}

func (goKeyring) Get(service, user string) (string, error) {
	v, err := gokeyring.Get(service, user)
	if errors.Is(err, gokeyring.ErrNotFound) {
		return "", ErrNotFound
	}
	return v, err
}

func (goKeyring) Set(service, user, password string) error {
	return gokeyring.Set(service, user, password)
}

func (goKeyring) Delete(service, user string) error {
	err := gokeyring.Delete(service, user)
	if errors.Is(err, gokeyring.ErrNotFound) {
		return ErrNotFound
	}
	return err
}

// keyringStore keeps one item per account id under Service, plus an index
// item so IDs can list them (keyrings cannot be enumerated portably).
//
// Every keyring call runs in a goroutine bounded by timeout, because a locked
// keyring or a dead D-Bus can block forever. A call that times out leaves its
// goroutine running until the keyring answers; slot (capacity 1) lets at most
// one such goroutine exist per Store, and later calls wait for the slot
// within their own timeout, so a stuck keyring costs one goroutine, not one
// per call. A Set or Delete that timed out may still take effect later.
type keyringStore struct {
	kr      Keyring
	timeout time.Duration
	slot    chan struct{}
	lock    string // cross-process lock guarding the index's read-modify-write
	clientKeys
}

func newKeyringStore(dir string, kr Keyring, timeout time.Duration) *keyringStore {
	s := &keyringStore{kr: kr, timeout: timeout, slot: make(chan struct{}, 1), lock: lockPath(dir)}
	s.clientKeys = keyringClientKeys(dir, s)
	return s
}

// Backend returns "keyring".
func (s *keyringStore) Backend() string { return BackendKeyring }

// call runs fn under the timeout. Errors wrapping ErrNotFound (ours or
// go-keyring's) come back as ErrNotFound; other failures become
// CodeKeyringUnavailable errors naming the item.
func (s *keyringStore) call(op, user string, fn func() (string, error)) (string, error) {
	timer := time.NewTimer(s.timeout)
	defer timer.Stop()
	select {
	case s.slot <- struct{}{}:
	case <-timer.C:
		// The previous call is still stuck in the keyring.
		return "", s.timeoutErr(op, user)
	}
	type result struct {
		v   string
		err error
	}
	done := make(chan result, 1) // buffered: the goroutine must never block after we gave up
	go func() {
		defer func() { <-s.slot }()
		defer func() {
			// A panicking keyring library must not take the process down
			// from a goroutine nobody may be waiting on. The panic value is
			// not reported: it could hold anything.
			if recover() != nil {
				done <- result{err: errors.New("keyring library panicked")}
			}
		}()
		v, err := fn()
		done <- result{v, err}
	}()
	select {
	case r := <-done:
		switch {
		case r.err == nil:
			return r.v, nil
		case errors.Is(r.err, ErrNotFound), errors.Is(r.err, gokeyring.ErrNotFound):
			return "", ErrNotFound
		case errors.Is(r.err, gokeyring.ErrSetDataTooBig):
			return "", &Error{
				Code:    CodeKeyringUnavailable,
				Path:    itemName(user),
				Message: fmt.Sprintf("keyring %s of %s: the secret is too large for this OS keyring", op, itemName(user)),
				Hint:    "set ROTOR_SECRETS=file to keep secrets in secrets.json (0600) instead",
				Err:     r.err,
			}
		default:
			return "", &Error{
				Code:    CodeKeyringUnavailable,
				Path:    itemName(user),
				Message: fmt.Sprintf("keyring %s of %s failed: %v", op, itemName(user), r.err),
				Err:     r.err,
			}
		}
	case <-timer.C:
		return "", s.timeoutErr(op, user)
	}
}

func (s *keyringStore) timeoutErr(op, user string) error {
	return &Error{
		Code:      CodeKeyringUnavailable,
		Retryable: true,
		Path:      itemName(user),
		Message:   fmt.Sprintf("keyring %s of %s: no answer within %s", op, itemName(user), s.timeout),
		Hint:      "unlock the OS keyring, or set ROTOR_SECRETS=file",
		Err:       ErrTimeout,
	}
}

func itemName(user string) string { return "keyring item " + Service + "/" + user }

// probe succeeds when the keyring answers a Get, whether or not the item exists.
func (s *keyringStore) probe() error {
	_, err := s.call("probe", probeUser, func() (string, error) { return s.kr.Get(Service, probeUser) })
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// Get returns the secret of id from its keyring item.
func (s *keyringStore) Get(id string) (Secret, error) {
	if err := checkID(id); err != nil {
		return Secret{}, err
	}
	v, err := s.call("get", id, func() (string, error) { return s.kr.Get(Service, id) })
	if errors.Is(err, ErrNotFound) {
		return Secret{}, notFoundErr(id)
	}
	if err != nil {
		return Secret{}, err
	}
	var sec Secret
	if err := json.Unmarshal([]byte(v), &sec); err != nil {
		return Secret{}, unreadableItem(id, err)
	}
	return sec, nil
}

// Set records id in the index first, then writes its item, so a failure in
// between leaves at worst an index entry without an item (harmless), never an
// item IDs cannot see (a secret nobody would clean up).
func (s *keyringStore) Set(id string, sec Secret) error {
	if err := checkID(id); err != nil {
		return err
	}
	b, err := json.Marshal(sec)
	if err != nil {
		return &Error{Code: CodeStorageWrite, Message: fmt.Sprintf("encoding the secret of account %q failed", id)}
	}
	return withLock(s.lock, true, func() error {
		if err := s.updateIndex(id, true); err != nil {
			return err
		}
		_, err := s.call("set", id, func() (string, error) { return "", s.kr.Set(Service, id, string(b)) })
		return err
	})
}

// Delete removes the item first and the index entry second, for the same
// reason Set writes them in the other order.
func (s *keyringStore) Delete(id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	return withLock(s.lock, true, func() error {
		_, err := s.call("delete", id, func() (string, error) { return "", s.kr.Delete(Service, id) })
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		return s.updateIndex(id, false)
	})
}

// Salt returns the fingerprint salt item, storing a new one when there is
// none; the store's lock makes concurrent first uses agree on one salt.
func (s *keyringStore) Salt() ([]byte, error) {
	get := func() (string, error) {
		return s.call("get", saltUser, func() (string, error) { return s.kr.Get(Service, saltUser) })
	}
	v, err := get()
	if errors.Is(err, ErrNotFound) {
		err = withLock(s.lock, true, func() error {
			v, err = get()
			if !errors.Is(err, ErrNotFound) {
				return err
			}
			if v, err = newSalt(); err != nil {
				return err
			}
			_, err = s.call("set", saltUser, func() (string, error) { return "", s.kr.Set(Service, saltUser, v) })
			return err
		})
	}
	if err != nil {
		return nil, err
	}
	return decodeSalt(v, itemName(saltUser))
}

// IDs returns the ids listed in the index item.
func (s *keyringStore) IDs() ([]string, error) {
	return s.readIndex()
}

func (s *keyringStore) readIndex() ([]string, error) {
	v, err := s.call("get", indexUser, func() (string, error) { return s.kr.Get(Service, indexUser) })
	if errors.Is(err, ErrNotFound) {
		return []string{}, nil
	}
	if err != nil {
		return nil, err
	}
	var ids []string
	if err := json.Unmarshal([]byte(v), &ids); err != nil {
		return nil, unreadableItem(indexUser, err)
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

// updateIndex adds or removes id; the caller holds the exclusive lock, so
// concurrent rotor processes do not lose each other's entries. An
// unparseable index is reported, never overwritten.
func (s *keyringStore) updateIndex(id string, add bool) error {
	ids, err := s.readIndex()
	if err != nil {
		return err
	}
	i, found := slices.BinarySearch(ids, id)
	switch {
	case add && found, !add && !found:
		return nil
	case add:
		ids = slices.Insert(ids, i, id)
	default:
		ids = slices.Delete(ids, i, i+1)
	}
	b, err := json.Marshal(ids)
	if err != nil {
		return &Error{Code: CodeStorageWrite, Message: "encoding the keyring index failed"}
	}
	_, err = s.call("set", indexUser, func() (string, error) { return "", s.kr.Set(Service, indexUser, string(b)) })
	return err
}

// unreadableItem reports a keyring item rotor cannot parse. The JSON error
// itself is not included: its text can quote bytes of the item.
func unreadableItem(user string, err error) error {
	return &Error{
		Code:    CodeStorageUnreadable,
		Path:    itemName(user),
		Message: fmt.Sprintf("%s cannot be parsed (%s); it was left untouched", itemName(user), jsonErrWhere(err)),
		Hint:    "delete that item with your OS keyring tool, then log in to the account again",
		Err:     errors.New("invalid JSON"),
	}
}

// jsonErrWhere describes where a JSON error happened without quoting input.
func jsonErrWhere(err error) string {
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return fmt.Sprintf("invalid JSON at byte %d", se.Offset)
	}
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		// te.Value is not used: for numbers it holds the number itself.
		return fmt.Sprintf("unexpected JSON type at byte %d", te.Offset)
	}
	return "invalid JSON"
}
