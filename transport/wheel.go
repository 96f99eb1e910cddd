package transport

import "math/bits"

// The node's channel deadlines (quiet-channel AckRequests, repeats of
// unanswered ones) live in a hashed timing wheel: with ten thousand channels
// a deadline expires for nearly every message sent, and a binary heap of
// that size costs a dozen cache misses per expiry where the wheel costs one
// append and one read. Deadlines are kept to the slot, never early: a slot
// expires once the clock has passed its end, so a deadline fires at most a
// slot late (the timer goroutine's own wake-up is coarser than that).
const (
	wheelShift = 16 // a slot is 2^16 ns, about 65.5 µs
	wheelSlots = 4096
	wheelMask  = wheelSlots - 1 // the wheel spans about 268 ms; later deadlines wait in far
)

// A slot is a list of nodes in one slab, linked by index; freed nodes are
// reused. The slab grows only when more deadlines are pending at once than
// ever before, so a steady load makes no garbage (slices per slot would keep
// growing, and leaving their old arrays behind, as each slot met a busier turn).
type wheel struct {
	cur   int64                   // the slot tick (time >> wheelShift) collected next
	n     int                     // deadlines in slots
	heads [wheelSlots]int32       // first node of each slot, -1: empty
	tails [wheelSlots]int32       // its last node, valid when heads[i] >= 0
	busy  [wheelSlots / 64]uint64 // bit i: slots[i] is not empty
	nodes []wheelNode
	free  int32        // first free node, -1: none
	far   deadlineHeap // deadlines beyond the span, earliest first
}

type wheelNode struct {
	d    deadline
	next int32
}

// newWheel returns an empty wheel whose clock starts at now.
func newWheel(now int64) *wheel {
	w := &wheel{cur: now >> wheelShift, free: -1}
	for i := range w.heads {
		w.heads[i] = -1
	}
	return w
}

// add files d in the slot of its time. An overdue d goes in the current slot
// and expires at the next look.
func (w *wheel) add(d deadline) {
	t := max(d.at>>wheelShift, w.cur)
	if t-w.cur >= wheelSlots {
		w.far.push(d)
		return
	}
	k := w.free
	if k >= 0 {
		w.free = w.nodes[k].next
	} else {
		w.nodes = append(w.nodes, wheelNode{})
		k = int32(len(w.nodes) - 1)
	}
	i := t & wheelMask
	w.nodes[k] = wheelNode{d: d, next: -1}
	if w.heads[i] < 0 {
		w.heads[i] = k
	} else {
		w.nodes[w.tails[i]].next = k // in the order added, as they will expire
	}
	w.tails[i] = k
	w.busy[i>>6] |= 1 << (i & 63)
	w.n++
}

// expire appends to due the channel of every deadline whose slot ended at or
// before now and that its channel still wants (its wakeAt is the
// deadline's time), and returns due.
func (w *wheel) expire(now int64, due []*channel) []*channel {
	end := now >> wheelShift // every slot tick below end has ended
	for w.cur < end {
		if w.n == 0 {
			// Nothing in the slots: jump to the end, or to the first far
			// deadline, whichever is sooner.
			next := end
			if len(w.far) > 0 {
				next = min(next, w.far[0].at>>wheelShift)
			}
			w.cur = max(w.cur, next)
		} else {
			i := w.cur & wheelMask
			for k := w.heads[i]; k >= 0; {
				nd := &w.nodes[k]
				if nd.d.ch.wakeAt.Load() == nd.d.at {
					due = append(due, nd.d.ch)
				}
				next := nd.next
				*nd = wheelNode{next: w.free} // drop the channel pointer
				w.free = k
				w.n--
				k = next
			}
			w.heads[i] = -1
			w.busy[i>>6] &^= 1 << (i & 63)
			w.cur++
		}
		// Far deadlines that the wheel now spans move into their slots.
		for len(w.far) > 0 && w.far[0].at>>wheelShift-w.cur < wheelSlots {
			w.add(w.far.pop())
		}
	}
	return due
}

// next returns the time at which the earliest deadline's slot ends, and
// false when the wheel is empty.
func (w *wheel) next() (int64, bool) {
	if w.n > 0 {
		// The first busy slot at or after cur, going round once.
		start := int(w.cur & wheelMask)
		for k := 0; k <= wheelSlots/64; k++ {
			word := (start>>6 + k) % (wheelSlots / 64)
			b := w.busy[word]
			if k == 0 {
				b &^= 1<<(start&63) - 1 // slots before start in the first word come last
			}
			if b == 0 {
				continue
			}
			i := word<<6 + bits.TrailingZeros64(b)
			t := w.cur + int64((i-start+wheelSlots)&wheelMask)
			return (t + 1) << wheelShift, true
		}
	}
	if len(w.far) > 0 {
		return (w.far[0].at>>wheelShift + 1) << wheelShift, true
	}
	return 0, false
}
