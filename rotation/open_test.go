package rotation

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/rotorproxy/rotor/accounts"
	"github.com/rotorproxy/rotor/accounts/home"
)

// Open loads state.json into the selector it returns, and a damaged one
// is reported but leaves a selector that works from empty state.
func TestOpenLoadsStateAndSurvivesDamage(t *testing.T) {
	t.Parallel()
	clk := newFakeClock()
	dir := t.TempDir()
	pool := &accounts.Pool{Version: 1}
	pool.AddAPIKey("a", "", clk.Now())
	id := pool.Accounts[0].ID

	rt := NewRuntime(dir, clk)
	rt.Cooldown(id, CooldownServerError, ServerErrorCooldown)
	if err := rt.Sync(nil); err != nil {
		t.Fatal(err)
	}
	sel, err := Open(dir, pool, clk, 1)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if st := sel.Status(); st[0].State != CoolingDown(CooldownServerError) {
		t.Errorf("state after Open = %q, want the cooldown in state.json", st[0].State)
	}

	if err := os.WriteFile(filepath.Join(dir, home.StateFile), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	sel, err = Open(dir, pool, clk, 1)
	if !errors.Is(err, ErrDamagedState) {
		t.Fatalf("Open on a damaged state.json: err = %v, want ErrDamagedState", err)
	}
	if next, why := sel.Next(); next != 1 {
		t.Errorf("Next after a damaged state.json = %d (%s), want account 1 from empty state", next, why)
	}
}
