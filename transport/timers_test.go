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
