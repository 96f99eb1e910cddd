package transport

import (
	"math/rand/v2"
	"slices"
	"testing"
)

func TestDeadlineHeapPopsInTimeOrderWithoutAllocating(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var h deadlineHeap
	var want []int64
	for round := range 50 {
		for range r.IntN(200) {
			at := r.Int64N(1000)
			h.push(deadline{at: at})
			want = append(want, at)
		}
		slices.Sort(want)
		pops := r.IntN(len(want) + 1)
		if round == 49 {
			pops = len(want)
		}
		for i := range pops {
			if got := h.pop().at; got != want[i] {
				t.Fatalf("round %d: pop %d gave %d, want %d", round, i, got, want[i])
			}
		}
		want = want[pops:]
		if len(h) != len(want) {
			t.Fatalf("round %d: heap holds %d, want %d", round, len(h), len(want))
		}
	}
	if a := testing.AllocsPerRun(100, func() { h.push(deadline{at: 5}); h.pop() }); a != 0 {
		t.Fatalf("a push and pop allocate %.0f objects", a)
	}
}

// The wheel hands out every deadline exactly once, never before its time and
// at most one slot after it, across slots, the far heap and long jumps of
// the clock (an overdue one at most a slot after it was added); next tells
// when the earliest one is due.
func TestWheelExpiresEachDeadlineOnceNeverEarlyAtMostASlotLate(t *testing.T) {
	const slot = int64(1) << wheelShift
	for seed := range uint64(20) {
		r := rand.New(rand.NewPCG(seed, 7))
		now := int64(1_000_000_000) + r.Int64N(1e9)
		start := now
		w := newWheel(now)
		chans := make([]channel, 3000)
		at := map[*channel]int64{}
		for i := range chans {
			var d int64
			switch r.IntN(4) {
			case 0: // soon
				d = r.Int64N(1_000_000)
			case 1: // within the span
				d = r.Int64N(wheelSlots * slot)
			case 2: // beyond it
				d = wheelSlots*slot + r.Int64N(10*wheelSlots*slot)
			case 3: // overdue
				d = -r.Int64N(1_000_000)
			}
			at[&chans[i]] = now + d
			chans[i].wakeAt.Store(now + d)
			w.add(deadline{at: now + d, ch: &chans[i]})
		}
		var due []*channel
		for len(at) > 0 {
			if next, ok := w.next(); !ok {
				t.Fatalf("seed %d: %d deadlines left but next says the wheel is empty", seed, len(at))
			} else {
				earliest := int64(1<<63 - 1)
				for _, a := range at {
					earliest = min(earliest, a)
				}
				if next < earliest || next > max(earliest, now)+slot {
					t.Fatalf("seed %d: next %d, earliest deadline %d (now %d)", seed, next, earliest, now)
				}
			}
			switch r.IntN(3) {
			case 0:
				now += r.Int64N(slot)
			case 1:
				now += r.Int64N(50 * slot)
			case 2:
				now += r.Int64N(3 * wheelSlots * slot) // more than a turn
			}
			due = w.expire(now, due[:0])
			for _, ch := range due {
				a, ok := at[ch]
				if !ok {
					t.Fatalf("seed %d: a deadline expired twice", seed)
				}
				if a > now {
					t.Fatalf("seed %d: deadline %d expired early, at %d", seed, a, now)
				}
				delete(at, ch)
			}
			for _, a := range at {
				// An overdue deadline counts from when it was added.
				if now >= max(a, start)+slot {
					t.Fatalf("seed %d: deadline %d not expired at %d, a slot later", seed, a, now)
				}
			}
		}
		if _, ok := w.next(); ok {
			t.Fatalf("seed %d: next reports a deadline in an empty wheel", seed)
		}
	}
}

// Once the wheel has held as many deadlines as a load keeps pending, adding
// and expiring them allocates nothing: a steady run makes no garbage.
func TestWheelReusesItsNodes(t *testing.T) {
	const slot = int64(1) << wheelShift
	w := newWheel(0)
	chans := make([]channel, 100)
	now := int64(0)
	var due []*channel
	round := func() {
		for i := range chans {
			chans[i].wakeAt.Store(now + int64(i%7)*slot)
			w.add(deadline{at: now + int64(i%7)*slot, ch: &chans[i]})
		}
		now += 8 * slot
		due = w.expire(now, due[:0])
		if len(due) != len(chans) {
			t.Fatalf("expired %d of %d", len(due), len(chans))
		}
	}
	round()
	if a := testing.AllocsPerRun(50, round); a != 0 {
		t.Fatalf("a round of 100 deadlines allocates %.0f objects", a)
	}
}

// A deadline its channel no longer wants (wakeAt changed or cleared) is
// dropped at expiry without calling the channel.
func TestWheelSkipsDeadlinesNoLongerWanted(t *testing.T) {
	const slot = int64(1) << wheelShift
	w := newWheel(0)
	chans := make([]channel, 3)
	for i := range chans {
		chans[i].wakeAt.Store(slot)
		w.add(deadline{at: slot, ch: &chans[i]})
	}
	chans[1].wakeAt.Store(0)        // answered: no wake-up wanted
	chans[2].wakeAt.Store(slot / 2) // moved earlier: its own entry fires it
	due := w.expire(4*slot, nil)
	if len(due) != 1 || due[0] != &chans[0] {
		t.Fatalf("expired %d channels, want only the first", len(due))
	}
	if _, ok := w.next(); ok {
		t.Error("skipped deadlines still occupy the wheel")
	}
}
