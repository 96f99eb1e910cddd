package transport

import (
	"sync"
	"sync/atomic"
)

// notifier wakes every goroutine waiting for a condition to change (credit
// freed, a channel drained). Signalling costs one atomic load when nobody
// waits.
type notifier struct {
	gen     atomic.Uint64 // broadcasts so far
	waiters atomic.Int32
	mu      sync.Mutex
	ch      chan struct{}
}

// wait returns a channel that is closed at the next broadcast. The caller
// must re-check its condition after calling wait and before blocking, and
// call done when it stops waiting.
func (n *notifier) wait() <-chan struct{} {
	n.waiters.Add(1)
	n.mu.Lock()
	if n.ch == nil {
		n.ch = make(chan struct{})
	}
	ch := n.ch
	n.mu.Unlock()
	return ch
}

func (n *notifier) done() { n.waiters.Add(-1) }

func (n *notifier) broadcast() {
	n.gen.Add(1)
	if n.waiters.Load() == 0 {
		return
	}
	n.mu.Lock()
	if n.ch != nil {
		close(n.ch)
		n.ch = nil
	}
	n.mu.Unlock()
}
