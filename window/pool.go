package window

import (
	"math/bits"
	"sync"
)

// Rings whose length is a power of two are recycled through pools, one per
// size: a transport that trims the windows of thousands of channels as
// their bursts are acknowledged hands the rings to the next burst, on
// whichever channel, instead of allocating and zeroing new ones and leaving
// the old ones to the garbage collector. A ring is boxed so that putting it
// in a pool allocates nothing.
type (
	byteRing   struct{ b []byte }
	recordRing struct{ r []record }
)

var (
	bytePools   [bits.UintSize]sync.Pool
	recordPools [bits.UintSize]sync.Pool
)

// sizeClass is the pool for rings of length n, if n is a power of two.
func sizeClass(n int) (int, bool) {
	if n <= 0 || n&(n-1) != 0 {
		return 0, false
	}
	return bits.TrailingZeros(uint(n)), true
}

func getBytes(n int) *byteRing {
	if c, ok := sizeClass(n); ok {
		if r, _ := bytePools[c].Get().(*byteRing); r != nil {
			return r
		}
	}
	return &byteRing{b: make([]byte, n)}
}

func putBytes(r *byteRing) {
	if r == nil {
		return
	}
	if c, ok := sizeClass(len(r.b)); ok {
		bytePools[c].Put(r)
	}
}

func getRecords(n int) *recordRing {
	if c, ok := sizeClass(n); ok {
		if r, _ := recordPools[c].Get().(*recordRing); r != nil {
			return r
		}
	}
	return &recordRing{r: make([]record, n)}
}

func putRecords(r *recordRing) {
	if r == nil {
		return
	}
	if c, ok := sizeClass(len(r.r)); ok {
		recordPools[c].Put(r)
	}
}
