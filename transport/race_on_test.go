//go:build race

package transport

// raceEnabled: the race detector's sync.Pool drops some of what is put.
const raceEnabled = true
