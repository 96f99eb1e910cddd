package engine

import "github.com/sluicehq/sluice/engine/clock"

// rounds is the coordinator's global minimum clock: the least of every
// node's readings over the last window complete rounds (see the package
// doc for why several rounds), kept monotone by a [clock.Service].
//
// Every (node, round slot) is registered at [clock.Start] before the first
// reading, so the service never sees a partial set: a service that held
// only the first node's first reading would publish it as the global
// minimum, and, being monotone, keep it even after the other nodes report
// messages older than it still in flight.
type rounds struct {
	svc    *clock.Service[roundKey]
	window int
	next   int // the round slot the next reading goes to
}

type roundKey struct{ node, slot int }

func newRounds(nodes, window int) *rounds {
	r := &rounds{svc: clock.New[roundKey](), window: window}
	for i := range nodes {
		for s := range window {
			r.svc.Register(roundKey{i, s}, clock.Start)
		}
	}
	return r
}

// report records node's minimum in the current round, replacing its
// reading of window rounds ago. While a round replaces the oldest one node
// by node, every node keeps window-1 complete rounds, which the argument of
// the package doc needs.
func (r *rounds) report(node int, min int64) {
	r.svc.Report(roundKey{node, r.next}, min)
}

// endRound starts the next round, once every node has reported.
func (r *rounds) endRound() { r.next = (r.next + 1) % r.window }

// min is the global minimum: [clock.Start] until window rounds are in,
// never decreasing.
func (r *rounds) min() int64 { return r.svc.Min() }
