//go:build race

package coding

// raceEnabled: the race detector drops a share of what sync.Pool is
// given, so a recycling test cannot count allocations under it.
const raceEnabled = true
