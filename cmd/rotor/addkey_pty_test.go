//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// openPTY opens a pseudo-terminal pair: the controlling side, which plays
// the person at the keyboard, and the terminal the program runs on.
func openPTY(t *testing.T) (ctl, tty *os.File) {
	t.Helper()
	fd, err := unix.Open("/dev/ptmx", unix.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	ctl = os.NewFile(uintptr(fd), "/dev/ptmx")
	if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(fd, unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ctl.Close(); tty.Close() })
	return ctl, tty
}

// On a terminal add-key prompts, and what is typed is not echoed: the
// terminal shows the prompt, never the key.
func TestAddKeyPromptsWithoutEcho(t *testing.T) {
	t.Parallel()
	h := newHome(t)
	ctl, tty := openPTY(t)
	const key = "sk-proj-TYPEDATPROMPT0123456789"

	ctx, cancel := context.WithTimeout(context.Background(), cmdTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, rotorBin, "add-key", "--label", "typed")
	cmd.Env = h.env
	cmd.Stdin, cmd.Stderr = tty, tty
	var stdout bytes.Buffer
	cmd.Stdout = &stdout
	cmd.SysProcAttr = &unix.SysProcAttr{Setsid: true, Setctty: true, Ctty: 0}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	tty.Close() // the child holds it now

	// Everything the terminal shows, read until the child closes it.
	var mu sync.Mutex
	var screen bytes.Buffer
	prompted, drained := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(drained)
		buf := make([]byte, 1024)
		once := sync.Once{}
		for {
			n, err := ctl.Read(buf)
			mu.Lock()
			screen.Write(buf[:n])
			if strings.Contains(screen.String(), "API key") {
				once.Do(func() { close(prompted) })
			}
			mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	select {
	case <-prompted:
	case <-time.After(20 * time.Second):
		mu.Lock()
		defer mu.Unlock()
		t.Fatalf("no prompt on the terminal within 20 s; it shows %q", screen.String())
	}
	// ReadPassword turns echo off before reading; the prompt is written
	// first, so wait until echo is off, as a person would type after it.
	deadline := time.Now().Add(10 * time.Second)
	for {
		tio, err := unix.IoctlGetTermios(int(ctl.Fd()), unix.TCGETS)
		if err == nil && tio.Lflag&unix.ECHO == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("echo was never turned off on the terminal")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := io.WriteString(ctl, key+"\r"); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		mu.Lock()
		t.Fatalf("add-key: %v\nterminal: %q\nstdout: %q", err, screen.String(), stdout.String())
	}
	select { // the terminal closes with its last holder, the child
	case <-drained:
	case <-time.After(10 * time.Second):
		t.Fatal("the terminal did not close after add-key exited")
	}
	mu.Lock()
	shown := screen.String()
	mu.Unlock()
	if strings.Contains(shown, "TYPEDATPROMPT") {
		t.Errorf("the terminal echoed the key: %q", shown)
	}
	if !strings.Contains(stdout.String(), "Added API-key account 1 (typed)") {
		t.Errorf("stdout %q", stdout.String())
	}
	if got := h.secretsFile()[h.pool().At(1).ID]["api_key"]; got != key {
		t.Errorf("stored key %q, want the one typed", got)
	}
}
