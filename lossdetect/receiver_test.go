package lossdetect

import (
	"math"
	"reflect"
	"testing"
)

// step is one input to a Receiver and the verdict it must give.
type step struct {
	op          string // "open", "data", "req", "consumed"
	epoch, seq  uint64
	want        Verdict
	wantAnswers []Ack // what Answer returns, in order, after the step
}

func runReceiver(t *testing.T, r *Receiver, steps []step) {
	t.Helper()
	for i, s := range steps {
		var got Verdict
		switch s.op {
		case "open":
			got = r.OnOpen(s.epoch, s.seq)
		case "data":
			got = r.OnData(s.epoch, s.seq)
		case "req":
			got = r.OnAckRequest(s.epoch, s.seq)
		case "consumed":
			r.Consumed(s.seq)
			got = Accept
		default:
			t.Fatalf("bad op %q", s.op)
		}
		if got != s.want {
			t.Fatalf("step %d %s(%d, %d) = %v, want %v", i, s.op, s.epoch, s.seq, got, s.want)
		}
		for j, want := range s.wantAnswers {
			a, ok := r.Answer()
			if !ok || a != want {
				t.Fatalf("step %d answer %d = %+v, %v; want %+v", i, j, a, ok, want)
			}
		}
		if a, ok := r.Answer(); ok {
			t.Fatalf("step %d: unexpected answer %+v", i, a)
		}
	}
}

func TestReceiver(t *testing.T) {
	tests := []struct {
		name  string
		steps []step
	}{
		{"data before any OPEN is unopened", []step{
			{op: "data", epoch: 1, seq: 0, want: Unopened},
			{op: "req", epoch: 1, seq: 1, want: Unopened},
		}},
		{"an OPEN is answered at once when nothing is unconsumed", []step{
			{op: "open", epoch: 3, seq: 10, want: Accept, wantAnswers: []Ack{{Open: true, Epoch: 3, ReqSeq: 10, Next: 10}}},
		}},
		{"only the next seq is accepted; below is duplicate, above is a gap", []step{
			{op: "open", epoch: 1, seq: 5, want: Accept, wantAnswers: []Ack{{Open: true, Epoch: 1, ReqSeq: 5, Next: 5}}},
			{op: "data", epoch: 1, seq: 6, want: Gap},
			{op: "data", epoch: 1, seq: 5, want: Accept},
			{op: "data", epoch: 1, seq: 5, want: Duplicate},
			{op: "data", epoch: 1, seq: 4, want: Duplicate},
			{op: "data", epoch: 1, seq: 6, want: Accept},
			{op: "data", epoch: 1, seq: math.MaxUint64 - 1, want: Gap},
		}},
		{"a request waits until everything accepted is consumed", []step{
			{op: "open", epoch: 1, seq: 0, want: Accept, wantAnswers: []Ack{{Open: true, Epoch: 1, ReqSeq: 0, Next: 0}}},
			{op: "data", epoch: 1, seq: 0, want: Accept},
			{op: "data", epoch: 1, seq: 1, want: Accept},
			{op: "req", epoch: 1, seq: 2, want: Accept},
			{op: "consumed", seq: 1, want: Accept},
			{op: "consumed", seq: 2, want: Accept, wantAnswers: []Ack{{Epoch: 1, ReqSeq: 2, Count: 2, Next: 2}}},
		}},
		{"a request beyond what arrived is answered with the gap's next", []step{
			{op: "open", epoch: 1, seq: 0, want: Accept, wantAnswers: []Ack{{Open: true, Epoch: 1, Next: 0}}},
			{op: "data", epoch: 1, seq: 0, want: Accept},
			{op: "data", epoch: 1, seq: 2, want: Gap},
			{op: "consumed", seq: 1, want: Accept},
			{op: "req", epoch: 1, seq: 3, want: Accept, wantAnswers: []Ack{{Epoch: 1, ReqSeq: 3, Count: 1, Next: 1}}},
		}},
		{"a newer request supersedes a pending one, an older one does not", []step{
			{op: "open", epoch: 1, seq: 0, want: Accept, wantAnswers: []Ack{{Open: true, Epoch: 1}}},
			{op: "data", epoch: 1, seq: 0, want: Accept},
			{op: "req", epoch: 1, seq: 1, want: Accept},
			{op: "req", epoch: 1, seq: 5, want: Accept},
			{op: "req", epoch: 1, seq: 3, want: Accept},
			{op: "consumed", seq: 1, want: Accept, wantAnswers: []Ack{{Epoch: 1, ReqSeq: 5, Count: 1, Next: 1}}},
		}},
		{"a repeated request is answered again with a count of zero", []step{
			{op: "open", epoch: 1, seq: 0, want: Accept, wantAnswers: []Ack{{Open: true, Epoch: 1}}},
			{op: "data", epoch: 1, seq: 0, want: Accept},
			{op: "consumed", seq: 1, want: Accept},
			{op: "req", epoch: 1, seq: 1, want: Accept, wantAnswers: []Ack{{Epoch: 1, ReqSeq: 1, Count: 1, Next: 1}}},
			{op: "req", epoch: 1, seq: 1, want: Accept, wantAnswers: []Ack{{Epoch: 1, ReqSeq: 1, Count: 0, Next: 1}}},
		}},
		{"consumption beyond next is clamped and never goes back", []step{
			{op: "open", epoch: 1, seq: 0, want: Accept, wantAnswers: []Ack{{Open: true, Epoch: 1}}},
			{op: "consumed", seq: math.MaxUint64, want: Accept},
			{op: "data", epoch: 1, seq: 0, want: Accept},
			{op: "req", epoch: 1, seq: 1, want: Accept},
			{op: "consumed", seq: 0, want: Accept},
			{op: "consumed", seq: 1, want: Accept, wantAnswers: []Ack{{Epoch: 1, ReqSeq: 1, Count: 1, Next: 1}}},
		}},
		{"an older epoch is stale for data, requests and opens", []step{
			{op: "open", epoch: 5, seq: 0, want: Accept, wantAnswers: []Ack{{Open: true, Epoch: 5}}},
			{op: "data", epoch: 4, seq: 0, want: Stale},
			{op: "req", epoch: 4, seq: 0, want: Stale},
			{op: "open", epoch: 4, seq: 0, want: Stale},
			{op: "data", epoch: 5, seq: 0, want: Accept},
		}},
		{"a higher epoch's data before its OPEN is unopened", []step{
			{op: "open", epoch: 5, seq: 0, want: Accept, wantAnswers: []Ack{{Open: true, Epoch: 5}}},
			{op: "data", epoch: 6, seq: 0, want: Unopened},
			{op: "req", epoch: 6, seq: 0, want: Unopened},
		}},
		{"a higher epoch's OPEN resets next and drops the old pending request", []step{
			{op: "open", epoch: 1, seq: 100, want: Accept, wantAnswers: []Ack{{Open: true, Epoch: 1, ReqSeq: 100, Next: 100}}},
			{op: "data", epoch: 1, seq: 100, want: Accept},
			{op: "req", epoch: 1, seq: 101, want: Accept},
			{op: "open", epoch: 2, seq: 7, want: Accept, wantAnswers: []Ack{{Open: true, Epoch: 2, ReqSeq: 7, Next: 7}}},
			{op: "data", epoch: 1, seq: 101, want: Stale},
			{op: "data", epoch: 2, seq: 7, want: Accept},
		}},
		{"an OPEN of the same epoch keeps next and waits for consumption", []step{
			{op: "open", epoch: 1, seq: 0, want: Accept, wantAnswers: []Ack{{Open: true, Epoch: 1}}},
			{op: "data", epoch: 1, seq: 0, want: Accept},
			{op: "data", epoch: 1, seq: 1, want: Accept},
			{op: "open", epoch: 1, seq: 0, want: Accept},
			{op: "consumed", seq: 2, want: Accept, wantAnswers: []Ack{{Open: true, Epoch: 1, ReqSeq: 0, Count: 2, Next: 2}}},
		}},
		{"an OPEN of the same epoch beyond next skips what the source dropped, at once", []step{
			{op: "open", epoch: 1, seq: 0, want: Accept, wantAnswers: []Ack{{Open: true, Epoch: 1}}},
			{op: "data", epoch: 1, seq: 0, want: Accept},
			{op: "data", epoch: 1, seq: 1, want: Accept},
			{op: "req", epoch: 1, seq: 5, want: Accept},
			// The source closed with 2..9 unacknowledged and opens again at 10;
			// 0 and 1 are not consumed yet: the answer waits for them, as an
			// ack of 10 would let the source send a window more while they
			// still wait for the task.
			{op: "open", epoch: 1, seq: 10, want: Accept},
			{op: "consumed", seq: 2, want: Accept, wantAnswers: []Ack{{Open: true, Epoch: 1, ReqSeq: 10, Count: 2, Next: 10}}},
			{op: "data", epoch: 1, seq: 9, want: Duplicate},
			{op: "data", epoch: 1, seq: 10, want: Accept},
			{op: "req", epoch: 1, seq: 11, want: Accept},
			{op: "consumed", seq: 11, want: Accept, wantAnswers: []Ack{{Epoch: 1, ReqSeq: 11, Count: 1, Next: 11}}},
		}},
		{"an Open ack comes before a pending request's ack", []step{
			{op: "open", epoch: 1, seq: 0, want: Accept, wantAnswers: []Ack{{Open: true, Epoch: 1}}},
			{op: "data", epoch: 1, seq: 0, want: Accept},
			{op: "req", epoch: 1, seq: 1, want: Accept},
			{op: "open", epoch: 1, seq: 0, want: Accept},
			{op: "consumed", seq: 1, want: Accept, wantAnswers: []Ack{
				{Open: true, Epoch: 1, ReqSeq: 0, Count: 1, Next: 1},
				{Epoch: 1, ReqSeq: 1, Count: 0, Next: 1},
			}},
		}},
		{"the seq MaxUint64 can never be accepted", []step{
			{op: "open", epoch: 1, seq: math.MaxUint64, want: Accept, wantAnswers: []Ack{{Open: true, Epoch: 1, ReqSeq: math.MaxUint64, Next: math.MaxUint64}}},
			{op: "data", epoch: 1, seq: math.MaxUint64, want: Invalid},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			runReceiver(t, NewReceiver(), tt.steps)
		})
	}
}

func TestReceiverStats(t *testing.T) {
	r := NewReceiver()
	r.OnData(1, 0) // unopened
	r.OnOpen(2, 0)
	r.OnData(2, 0) // accepted
	r.OnData(2, 0) // duplicate
	r.OnData(2, 5) // gap
	r.OnData(1, 0) // stale
	r.OnAckRequest(2, 1)
	r.Consumed(1)
	r.Answer() // the Open ack
	r.Answer() // the request's ack
	r.OnOpen(3, 0)
	r.OnOpen(3, 4) // the source skips 0..3
	want := ReceiverStats{Accepted: 1, Duplicates: 1, Gaps: 1, Stale: 1, Unopened: 1, Opens: 3, Resets: 1, Skipped: 4, AckRequests: 1, Acks: 2}
	if got := r.Stats(); got != want {
		t.Fatalf("Stats() = %+v, want %+v", got, want)
	}
	if r.Epoch() != 3 || r.Next() != 4 || !r.IsOpen() {
		t.Fatalf("after reset: epoch %d next %d open %v", r.Epoch(), r.Next(), r.IsOpen())
	}
}

func TestVerdictString(t *testing.T) {
	for v, want := range map[Verdict]string{Accept: "accept", Duplicate: "duplicate", Gap: "gap", Stale: "stale", Unopened: "unopened", Invalid: "invalid", 200: "verdict(200)"} {
		if got := v.String(); got != want {
			t.Errorf("Verdict(%d).String() = %q, want %q", v, got, want)
		}
	}
}

func BenchmarkReceiverOnData(b *testing.B) {
	r := NewReceiver()
	r.OnOpen(1, 0)
	r.Answer()
	var seq uint64
	b.ReportAllocs()
	for b.Loop() {
		if r.OnData(1, seq) != Accept {
			b.Fatal("not accepted")
		}
		seq++
		if seq&255 == 0 {
			r.OnAckRequest(1, seq)
			r.Consumed(seq)
			if _, ok := r.Answer(); !ok {
				b.Fatal("no answer")
			}
		}
	}
}

// TestAcceptRun checks AcceptRun against k calls of OnData on a copy of the
// same receiver: where it reports true they must all have been accepted and
// the two receivers must agree; where it reports false it must have changed
// nothing, and at least one of the k would not have been accepted.
func TestAcceptRun(t *testing.T) {
	type run struct {
		epoch, first uint64
		k            int
	}
	base := func() *Receiver {
		r := new(Receiver)
		r.OnOpen(3, 100)
		return r
	}
	nearEnd := func() *Receiver {
		r := new(Receiver)
		r.OnOpen(3, math.MaxUint64-4)
		return r
	}
	cases := []struct {
		name string
		r    func() *Receiver
		run  run
		want bool
	}{
		{"next, current epoch", base, run{3, 100, 64}, true},
		{"one message", base, run{3, 100, 1}, true},
		{"empty run", base, run{3, 100, 0}, false},
		{"starts below next: duplicates first", base, run{3, 90, 20}, false},
		{"all below next", base, run{3, 10, 5}, false},
		{"starts above next: a gap", base, run{3, 101, 5}, false},
		{"older epoch", base, run{2, 100, 5}, false},
		{"newer epoch, not opened", base, run{4, 100, 5}, false},
		{"never opened", func() *Receiver { return new(Receiver) }, run{0, 0, 5}, false},
		{"ends at the last seq that can exist", nearEnd, run{3, math.MaxUint64 - 4, 4}, true},
		{"reaches the seq that cannot exist", nearEnd, run{3, math.MaxUint64 - 4, 5}, false},
		{"wraps past the end", nearEnd, run{3, math.MaxUint64 - 4, 9}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fast, slow := c.r(), c.r()
			before := *fast
			allAccepted := c.run.k > 0
			for i := 0; i < c.run.k; i++ {
				if slow.OnData(c.run.epoch, c.run.first+uint64(i)) != Accept {
					allAccepted = false
				}
			}
			got := fast.AcceptRun(c.run.epoch, c.run.first, c.run.k)
			if got != c.want || got != allAccepted {
				t.Fatalf("AcceptRun = %v, want %v (OnData accepted all: %v)", got, c.want, allAccepted)
			}
			if !got {
				if !reflect.DeepEqual(*fast, before) {
					t.Fatalf("a refused AcceptRun changed the receiver: %+v -> %+v", before, *fast)
				}
				return
			}
			if !reflect.DeepEqual(*fast, *slow) {
				t.Fatalf("AcceptRun left %+v, OnData one by one %+v", *fast, *slow)
			}
		})
	}
}
