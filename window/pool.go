package window

import (
	"fmt"
	"math/bits"
	"sync"
)

// Pool keeps the rings that Senders give back (when they grow, shrink or
// are trimmed) for other Senders to reuse, up to a bound in bytes. Without
// one, every ring is a new allocation, zeroed and later collected: with
// thousands of channels whose windows are trimmed as their bursts are
// acknowledged and grown again at their next burst, that churn took a third
// of the CPU (10,000 channels of 1 KiB messages). Rings of one size are
// interchangeable: a Sender overwrites every byte it reads back.
//
// A Pool is safe for concurrent use by the Senders that share it (each
// Sender itself is not).
type Pool struct {
	max int // bytes the pool may hold

	mu struct {
		sync.Mutex
		held  int
		bytes freeLists[byte]
		recs  freeLists[record]
	}
}

// freeLists holds free rings by size class (log2 of their length).
type freeLists[T any] [poolClasses][][]T

// pop takes a ring of class c, if there is one.
func (f *freeLists[T]) pop(c int) ([]T, bool) {
	free := f[c]
	if len(free) == 0 {
		return nil, false
	}
	r := free[len(free)-1]
	free[len(free)-1] = nil
	f[c] = free[:len(free)-1]
	return r, true
}

// poolClasses covers ring sizes up to 2^(poolClasses-1), beyond any ring a
// valid Config allows (MaxBytesLimit bytes; MaxMessagesLimit records).
const poolClasses = 32

// NewPool returns a pool that holds at most maxBytes of rings; a ring given
// back beyond that is left to the garbage collector. It panics if maxBytes
// is negative.
func NewPool(maxBytes int) *Pool {
	if maxBytes < 0 {
		panic(fmt.Sprintf("window: pool bound %d is negative", maxBytes))
	}
	return &Pool{max: maxBytes}
}

// Held returns the bytes of rings the pool holds now.
func (p *Pool) Held() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mu.held
}

// class returns the size class of a ring of n elements, or false when n is
// not a power of two (such rings are not pooled).
func class(n int) (int, bool) {
	if n <= 0 || n&(n-1) != 0 {
		return 0, false
	}
	c := bits.Len(uint(n)) - 1
	return c, c < poolClasses
}

// getBytes returns a byte ring of n bytes: from the pool if it holds one,
// else a new one (always new from a nil pool).
func (p *Pool) getBytes(n int) []byte {
	if p == nil {
		return make([]byte, n)
	}
	return take(p, &p.mu.bytes, n, 1)
}

// putBytes gives b back (a nil pool or a nil b: nothing to do).
func (p *Pool) putBytes(b []byte) {
	if p != nil {
		give(p, &p.mu.bytes, b, 1)
	}
}

// getRecords is getBytes for record rings of n slots.
func (p *Pool) getRecords(n int) []record {
	if p == nil {
		return make([]record, n)
	}
	return take(p, &p.mu.recs, n, recordSize)
}

// putRecords is putBytes for record rings.
func (p *Pool) putRecords(r []record) {
	if p != nil {
		give(p, &p.mu.recs, r, recordSize)
	}
}

// take returns a ring of n elements of elem bytes each from free, or a new
// one.
func take[T any](p *Pool, free *freeLists[T], n, elem int) []T {
	if c, ok := class(n); ok {
		p.mu.Lock()
		r, ok := free.pop(c)
		if ok {
			p.mu.held -= n * elem
		}
		p.mu.Unlock()
		if ok {
			return r
		}
	}
	return make([]T, n)
}

// give puts r, whose elements take elem bytes each, into free if it has a
// size class and the pool room for it.
func give[T any](p *Pool, free *freeLists[T], r []T, elem int) {
	c, ok := class(len(r))
	if !ok || len(r) != cap(r) {
		return
	}
	size := len(r) * elem
	p.mu.Lock()
	if p.makeRoom(size) {
		free[c] = append(free[c], r)
		p.mu.held += size
	}
	p.mu.Unlock()
}

// makeRoom makes sure the pool can take size more bytes, dropping rings of
// the sizes it holds the most bytes of (sizes nobody asks for again would
// otherwise fill it for good). It reports false if size alone is over the
// bound. The caller holds mu.
func (p *Pool) makeRoom(size int) bool {
	if size > p.max {
		return false
	}
	for p.mu.held+size > p.max {
		bc, bHeld, rc, rHeld := -1, 0, -1, 0
		for c := range poolClasses {
			if h := len(p.mu.bytes[c]) << c; h > bHeld {
				bc, bHeld = c, h
			}
			if h := len(p.mu.recs[c]) << c * recordSize; h > rHeld {
				rc, rHeld = c, h
			}
		}
		if bHeld >= rHeld {
			p.mu.bytes.pop(bc)
			p.mu.held -= 1 << bc
		} else {
			p.mu.recs.pop(rc)
			p.mu.held -= (1 << rc) * recordSize
		}
	}
	return true
}
