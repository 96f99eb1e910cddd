package spin

import "testing"

// Pause returns for every count, including those that a count-down loop
// testing only for zero would run past (0, negative).
func TestPauseReturnsForAnyCount(t *testing.T) {
	for _, n := range []int{-1 << 62, -1, 0, 1, 30, 1000} {
		Pause(n)
	}
}

func BenchmarkPause30(b *testing.B) {
	for range b.N {
		Pause(30)
	}
}
