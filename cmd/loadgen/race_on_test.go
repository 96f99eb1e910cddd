//go:build race

package main

// raceEnabled reports whether the tests run under the race detector, where
// everything is several times slower.
const raceEnabled = true
