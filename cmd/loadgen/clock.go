package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/transport"
)

// Latency across hosts: a receiver measures a message's latency as its own
// clock minus the send time in the payload, so the two hosts' clocks must
// agree. They need not: a sender stamps its send times in the receiver's
// clock, adding the offset its transport peer estimates from PING round
// trips (transport.Peer.ClockOffset: the receiver's clock minus this node's,
// to within half the shortest recent round trip). The latencies are then
// right to within that bound, which the report states.
//
// The transport's clock (Node.Clock) and bench.Now are both the wall clock
// read once (at node start, at process start) advanced by the monotonic
// clock: they agree unless the wall clock was stepped in between.

const (
	// clockPing is the ping interval of the nodes of send and agent: a
	// fresh sample every 100 ms, eight of them to choose from.
	clockPing = 100 * time.Millisecond
	// clockMinSamples is how many round trips a sender waits for before
	// it stamps with the estimate.
	clockMinSamples = 4
	// clockWait bounds that wait.
	clockWait = 10 * time.Second
)

// clockCorrector keeps shift at its peer's current clock offset while a
// run sends, and records the offsets and bounds it applied.
type clockCorrector struct {
	peer  *transport.Peer
	shift atomic.Int64
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once

	mu   sync.Mutex
	used bench.ClockCorrection
}

// startClockCorrection waits until peer's offset has been estimated from
// clockMinSamples round trips and then follows it until finish.
func startClockCorrection(ctx context.Context, peer *transport.Peer) (*clockCorrector, error) {
	ctx, cancel := context.WithTimeout(ctx, clockWait)
	defer cancel()
	for {
		o, ok := peer.ClockOffset()
		if ok && o.Samples >= clockMinSamples {
			k := &clockCorrector{peer: peer, stop: make(chan struct{}), done: make(chan struct{}),
				used: bench.ClockCorrection{Method: "ping", MinOffsetNS: int64(o.Offset), MaxOffsetNS: int64(o.Offset),
					ErrorNS: int64(o.Error), Samples: o.Samples}}
			k.shift.Store(int64(o.Offset))
			go k.follow()
			return k, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no estimate of %s's clock from %d round trips within %v (a peer that predates clock PONGs?); --clock-correction=false trusts the hosts' clocks instead", peer.Addr(), clockMinSamples, clockWait)
		case <-time.After(clockPing / 4):
		}
	}
}

func (k *clockCorrector) follow() {
	defer close(k.done)
	t := time.NewTicker(clockPing)
	defer t.Stop()
	for {
		select {
		case <-k.stop:
			return
		case <-t.C:
		}
		if o, ok := k.peer.ClockOffset(); ok {
			k.shift.Store(int64(o.Offset))
			k.mu.Lock()
			u := &k.used
			u.MinOffsetNS, u.MaxOffsetNS = min(u.MinOffsetNS, int64(o.Offset)), max(u.MaxOffsetNS, int64(o.Offset))
			u.ErrorNS = max(u.ErrorNS, int64(o.Error))
			k.mu.Unlock()
		}
	}
}

// finish stops following and returns what was applied; it may be called
// more than once. A nil k (no correction) returns method "none".
func (k *clockCorrector) finish() *bench.ClockCorrection {
	if k == nil {
		return &bench.ClockCorrection{Method: "none"}
	}
	k.once.Do(func() { close(k.stop) })
	<-k.done
	k.mu.Lock()
	defer k.mu.Unlock()
	u := k.used
	return &u
}

// shiftOf returns k's shift for transportConfig, nil for no correction.
func (k *clockCorrector) shiftOf() *atomic.Int64 {
	if k == nil {
		return nil
	}
	return &k.shift
}
