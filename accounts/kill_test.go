package accounts

import (
	"bufio"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rotorproxy/rotor/accounts/home"
)

// writerEnv makes the test binary a store writer (see TestHelperStoreWriter).
const writerEnv = "ROTOR_TEST_STORE_WRITER_DIR"

// TestHelperStoreWriter is not a test: run by TestKillDuringUpdate as a child
// process, it updates the store in a tight loop until it is killed. It says
// "writing" on stdout after its first update. It exits by itself after 30 s
// so that a child nobody kills cannot outlive the test run.
func TestHelperStoreWriter(t *testing.T) {
	t.Parallel()
	dir := os.Getenv(writerEnv)
	if dir == "" {
		t.Skip("helper process for TestKillDuringUpdate")
	}
	st, err := Open(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	deadline := time.Now().Add(30 * time.Second)
	for n := 0; time.Now().Before(deadline); n++ {
		_, err := st.Update(func(p *Pool) error {
			p.AffinityGeneration++
			// Labels of very different sizes make every write a different
			// length, some spanning several pages, so a torn write shows.
			p.AddAPIKey(strings.Repeat("x", rand.IntN(6000)), "", time.Now())
			if len(p.Accounts) > 6 {
				p.Remove(1)
			}
			if n%3 == 0 && len(p.Accounts) > 0 {
				id := p.Accounts[len(p.Accounts)-1].ID
				p.PinnedAccountID = &id
			}
			return nil
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		if n == 0 {
			fmt.Println("writing")
		}
	}
	os.Exit(0)
}

// TestKillDuringUpdate kills a process that is rewriting the store, at a
// random moment, many times over. Every time, accounts.json must still parse
// and must not have gone back in time, every backup that exists must parse,
// and the only other files are the lock and hidden temp files, which the
// store never reads.
func TestKillDuringUpdate(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("spawns 30 processes")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "home")
	st, err := Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Update(func(p *Pool) error { p.AddAPIKey("seed", "", time.Now()); return nil }); err != nil {
		t.Fatal(err)
	}

	const rounds = 30
	budget := time.Now().Add(3 * time.Minute)
	var lastGen int64
	for round := range rounds {
		if time.Now().After(budget) {
			t.Fatalf("only %d rounds in 3 minutes", round)
		}
		cmd := exec.Command(exe, "-test.run=^TestHelperStoreWriter$", "-test.count=1")
		cmd.Env = append(os.Environ(), writerEnv+"="+dir)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		ready := make(chan error, 1)
		go func() {
			line, err := bufio.NewReader(out).ReadString('\n')
			if err == nil && line != "writing\n" {
				err = fmt.Errorf("unexpected output %q", line)
			}
			ready <- err
		}()
		select {
		case err := <-ready:
			if err != nil {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("round %d: writer did not start: %v; stderr: %s", round, err, stderr.String())
			}
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("round %d: writer did not start within 30 s; stderr: %s", round, stderr.String())
		}
		time.Sleep(time.Duration(rand.IntN(25000)) * time.Microsecond)
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		err = cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !ee.Sys().(syscall.WaitStatus).Signaled() {
			t.Fatalf("round %d: writer ended with %v before the kill; stderr: %s", round, err, stderr.String())
		}

		data, err := os.ReadFile(st.Path())
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		p, err := Parse(st.Path(), data)
		if err != nil {
			t.Fatalf("round %d: accounts.json does not parse after kill -9: %v", round, err)
		}
		if p.AffinityGeneration < lastGen {
			t.Fatalf("round %d: affinity_generation went back from %d to %d", round, lastGen, p.AffinityGeneration)
		}
		lastGen = p.AffinityGeneration
		if lp, err := st.Load(); err != nil || lp.AffinityGeneration != p.AffinityGeneration {
			t.Fatalf("round %d: Load = generation %v, %v; want the content of accounts.json", round, lp, err)
		}
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			name := e.Name()
			switch {
			case name == home.AccountsFile || name == ".lock":
			case strings.HasPrefix(name, home.AccountsFile+".bak"):
				b, err := os.ReadFile(filepath.Join(dir, name))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := Parse(name, b); err != nil {
					t.Errorf("round %d: backup %s does not parse: %v", round, name, err)
				}
			case strings.HasPrefix(name, "."+home.AccountsFile+".tmp-") ||
				strings.HasPrefix(name, "."+filepath.Base(home.BackupName(home.AccountsFile, 0))+".tmp-"):
				// an interrupted write: hidden, never read as the store
			default:
				t.Errorf("round %d: unexpected file %s in the home", round, name)
			}
		}
	}
	if lastGen < rounds {
		t.Errorf("affinity_generation is %d after %d rounds: the writers hardly wrote", lastGen, rounds)
	}
	temps, _ := filepath.Glob(filepath.Join(dir, ".*.tmp-*"))
	t.Logf("%d rounds, %d updates, %d temp files left by killed writers", rounds, lastGen, len(temps))
}
