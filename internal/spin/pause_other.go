//go:build !amd64

package spin

// sink keeps Pause's loop from being compiled away.
var sink int

// Pause spins for about n short steps; n <= 0 returns at once. Without an
// assembly spin-wait hint on this architecture it is a plain loop.
func Pause(n int) {
	s := 0
	for i := 0; i < n; i++ {
		s += i
	}
	sink = s
}
