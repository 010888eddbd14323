//go:build windows

package main

import "os/exec"

// ownGroup leaves cmd as it is: cancellation kills the process itself
// (the end-to-end tests run on Unix).
func ownGroup(*exec.Cmd) {}
