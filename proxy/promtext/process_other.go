//go:build !linux

package promtext

// writeSystem writes nothing: only Linux's /proc is read for the process's
// resident memory, CPU time and open files.
func writeSystem(*Writer) {}
