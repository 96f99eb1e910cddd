package transport

import (
	"testing"

	"github.com/sluicehq/sluice/taskid"
)

// The queue of a task that never catches up (one delivery always waiting)
// stays the size of what waits, not of everything it ever queued, and
// deliveries come out in the order they went in.
func TestAnInboxThatNeverEmptiesDoesNotGrow(t *testing.T) {
	in := newInbox(taskid.ID{})
	in.push(&delivery{first: 0})
	next := uint64(0)
	for i := 1; i <= 100_000; i++ {
		in.push(&delivery{first: uint64(i)})
		d := in.pop()
		if d == nil || d.first != next {
			t.Fatalf("pop %d: got %+v, want the delivery with first %d", i, d, next)
		}
		next++
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if waiting := len(in.mu.q) - in.mu.head; waiting != 1 {
		t.Fatalf("%d deliveries waiting, want 1", waiting)
	}
	if c := cap(in.mu.q); c > 8 {
		t.Errorf("the queue's capacity is %d after 100,000 deliveries with one waiting, want a few", c)
	}
}

// A connection's ready list that never empties (more channels ready than a
// batch takes, all the time) stays the size of what is ready.
func TestAReadyListThatNeverEmptiesDoesNotGrow(t *testing.T) {
	c, _, _ := socketConn(t)
	chs := []*channel{{}, {}}
	c.mu.Lock()
	c.addReadyLocked(chs[0])
	c.mu.Unlock()
	for i := 1; i <= 100_000; i++ {
		c.mu.Lock()
		c.addReadyLocked(chs[i%2])
		c.mu.Unlock()
		if got := c.popReady(); got != chs[(i-1)%2] {
			t.Fatalf("pop %d: got channel %p, want %p", i, got, chs[(i-1)%2])
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if ready := len(c.mu.ready) - c.mu.readyHead; ready != 1 {
		t.Fatalf("%d channels ready, want 1", ready)
	}
	if n := cap(c.mu.ready); n > 8 {
		t.Errorf("the ready list's capacity is %d after 100,000 channels with one always ready, want a few", n)
	}
}
