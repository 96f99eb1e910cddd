package engine

import (
	"context"
	"math"
	"sync"

	"github.com/sluicehq/sluice/engine/clock"
	"github.com/sluicehq/sluice/transport"
)

// aggregator is a worker's view of its tasks' clocks: each task sets its
// own slot, and the worker's clock is the least of them, read under the
// same lock. Unlike clock.Service it is not monotone: a message arriving
// from another node may legitimately lower this node's minimum.
type aggregator struct {
	mu     sync.Mutex
	clocks []int64
}

func (a *aggregator) add() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.clocks = append(a.clocks, clock.Start)
	return len(a.clocks) - 1
}

func (a *aggregator) set(slot int, v int64) {
	a.mu.Lock()
	a.clocks[slot] = v
	a.mu.Unlock()
}

func (a *aggregator) min() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	m := clock.Idle
	for _, c := range a.clocks {
		m = min(m, c)
	}
	return m
}

// outputs are a task's outgoing channels and the bookkeeping of its clock:
// for each channel, a monotone deque of (messages pushed through the end of
// a run, least timestamp of the runs after the previous entry), so that the
// least timestamp not yet acknowledged is the front once acknowledged runs
// are popped.
type outputs struct {
	em    Emitter
	edges []outEdge
	sends [][]*transport.Sender // by edge, by target index; nil where chained
	// chained are the targets reached by a direct call instead of a
	// transport channel, by edge, by target index (nil where sent); see
	// [Worker.Start] for which edges are chained.
	chained [][]*taskRun
	wm      []transport.Message // scratch for chained runs
	agg     *aggregator
	slot    int

	// qOf is the index in mu.q of the queue of each sent target, by
	// edge, by target index (-1 where chained). Two edges to the same
	// processor send to each target task on one channel (source, target,
	// generation), whose acknowledgements count the messages of both: they
	// share one queue, or each would take the other's acknowledged
	// messages for its own and let go of its clock too early.
	qOf [][]int

	mu struct {
		sync.Mutex
		q      []ackQueue // one per distinct channel
		low    int64      // sources: no later record is below; tasks: Idle
		failed bool
	}
}

type ackQueue struct {
	s      *transport.Sender
	pushed uint64
	marks  []mark // minTs strictly increasing from the front
	head   int
}

type mark struct {
	end   uint64
	minTs int64
}

func newOutputs(edges []outEdge, sends [][]*transport.Sender, agg *aggregator, low int64) *outputs {
	o := &outputs{edges: edges, sends: sends, agg: agg, chained: make([][]*taskRun, len(edges)), qOf: make([][]int, len(edges))}
	o.em.edges = make([]emitEdge, len(edges))
	byChannel := map[*transport.Sender]int{}
	for i, e := range edges {
		o.em.edges[i] = emitEdge{part: e.part, targets: make([]outBuf, e.n)}
		o.chained[i] = make([]*taskRun, e.n)
		o.qOf[i] = make([]int, len(sends[i]))
		for t, s := range sends[i] {
			if s == nil {
				o.qOf[i][t] = -1
				continue
			}
			q, ok := byChannel[s]
			if !ok {
				q = len(o.mu.q)
				byChannel[s] = q
				o.mu.q = append(o.mu.q, ackQueue{s: s})
			}
			o.qOf[i][t] = q
		}
	}
	o.mu.low = low
	o.slot = agg.add()
	o.reportLocked()
	return o
}

func (q *ackQueue) push(n int, minTs int64) {
	q.pushed += uint64(n)
	for len(q.marks) > q.head && q.marks[len(q.marks)-1].minTs >= minTs {
		q.marks = q.marks[:len(q.marks)-1]
	}
	q.marks = append(q.marks, mark{end: q.pushed, minTs: minTs})
}

func (q *ackQueue) ack(acked uint64) {
	for q.head < len(q.marks) && q.marks[q.head].end <= acked {
		q.head++
	}
	if q.head == len(q.marks) {
		q.marks, q.head = q.marks[:0], 0
	} else if q.head > 1024 && q.head*2 > len(q.marks) {
		q.marks = append(q.marks[:0], q.marks[q.head:]...)
		q.head = 0
	}
}

func (q *ackQueue) min() int64 {
	if q.head < len(q.marks) {
		return q.marks[q.head].minTs
	}
	return clock.Idle
}

// reportLocked publishes the task's clock to its worker.
func (o *outputs) reportLocked() {
	if o.mu.failed {
		o.agg.set(o.slot, clock.Start)
		return
	}
	m := o.mu.low
	for i := range o.mu.q {
		m = min(m, o.mu.q[i].min())
	}
	o.agg.set(o.slot, m)
}

// flush sends what the emitter collected, then records the runs and
// reports the clock, with low as the task's new bound (math.MinInt64 keeps
// the old one). It returns the number of messages sent.
func (o *outputs) flush(ctx context.Context, low int64) (int, error) {
	total := 0
	type sent struct {
		q     int
		n     int
		minTs int64
	}
	var done [8]sent
	runs := done[:0]
	var err error
	for e := range o.em.edges {
		ed := &o.em.edges[e]
		for t := range ed.targets {
			b := &ed.targets[t]
			if len(b.ts) == 0 || err != nil {
				b.reset()
				continue
			}
			wm := o.wm[:0]
			start := 0
			for i, end := range b.ends {
				wm = append(wm, transport.Message{Ts: b.ts[i], Payload: b.buf[start:end:end]})
				start = end
			}
			o.wm = wm
			if to := o.chained[e][t]; to != nil {
				// The target has consumed the run when handle returns, and
				// has reported the clock of what it emitted: nothing of it
				// stays unacknowledged here.
				to.handle(wm)
				clear(wm)
				total += len(wm)
				b.reset()
				continue
			}
			var n int
			n, err = o.sends[e][t].SendRun(ctx, wm)
			clear(wm)
			if n > 0 {
				runs = append(runs, sent{q: o.qOf[e][t], n: n, minTs: b.minTs})
			}
			total += n
			b.reset()
		}
	}
	o.mu.Lock()
	for _, r := range runs {
		o.mu.q[r.q].push(r.n, r.minTs)
	}
	if low != math.MinInt64 {
		o.mu.low = low
	}
	o.reportLocked()
	o.mu.Unlock()
	return total, err
}

// tick pops acknowledged runs and reports the clock.
func (o *outputs) tick() {
	o.mu.Lock()
	defer o.mu.Unlock()
	for i := range o.mu.q {
		q := &o.mu.q[i]
		if q.s == nil || q.head == len(q.marks) {
			continue
		}
		st := q.s.Stats()
		q.ack(st.Sent - uint64(st.Unacked))
	}
	o.reportLocked()
}

// fail freezes the task's clock until the coordinator recovers.
func (o *outputs) fail() {
	o.mu.Lock()
	o.mu.failed = true
	o.reportLocked()
	o.mu.Unlock()
}

func (o *outputs) closeSenders() {
	for _, ss := range o.sends {
		for _, s := range ss {
			if s == nil {
				continue
			}
			_ = s.Close()
		}
	}
}
