package spin

// Pause executes the PAUSE instruction n times; n <= 0 returns at once.
// One PAUSE takes from about ten to about 140 cycles, by CPU model.
//
//go:noescape
func Pause(n int)
