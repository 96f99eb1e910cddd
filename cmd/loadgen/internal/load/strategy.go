package load

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/transport"
)

// Clock is the fixed-rate drivers' clock: a Go timer for the long part of
// each wait and a kernel sleep (nanosleep) for its last 2 ms, never
// spinning. On two cores a spinning driver takes the CPU the transport's
// loops need, which shows as latency in what it measures; a driver on Go
// timers alone hands messages over up to a millisecond late whenever the
// process is idle, and that lateness was counted as the transport's. On a
// 2-core AMD EPYC VM at 100 k msgs/s the driver alone, sending nothing, was
// 1.08-1.16 ms late at p99 on Go timers and 0.11-0.19 ms with this clock
// (0.61 ms once in 24 runs).
var Clock = bench.RealClock{KernelBelow: bench.DefaultKernelBelow}

// FixedRate sends message i at its intended time start+i/cfg.Rate, on
// sender i mod len(senders), every message due within cfg.Duration. The
// Result says how far it fell behind its schedule. It stops early when ctx
// ends (ctx's error) or a send fails (a *bench.SendError).
func FixedRate(ctx context.Context, cfg Config, senders []*transport.Sender) (bench.Result, error) {
	if err := cfg.check(len(senders)); err != nil {
		return bench.Result{}, err
	}
	src := newPayloads(cfg.Size, len(senders), cfg.Shift)
	d := bench.FixedRate{Rate: cfg.Rate, Duration: cfg.Duration, Clock: Clock}
	return d.Run(ctx, src.roundRobin(senders, nil))
}

// Count sends n messages: at cfg.Rate, message i on sender i mod
// len(senders) (bench.FixedRate on [Clock]); with no rate, as fast
// as the senders take them, from cfg.Producers goroutines sending runs as
// MaxRate's do (a channel with more credit takes more of the n). It returns
// how many were sent, n unless ctx ended (ctx's error) or a send failed (at
// a fixed rate a *bench.SendError, else the sender's error).
func Count(ctx context.Context, cfg Config, n int64, senders []*transport.Sender) (int64, error) {
	if err := cfg.check(len(senders)); err != nil {
		return 0, err
	}
	if cfg.Rate > 0 {
		src := newPayloads(cfg.Size, len(senders), cfg.Shift)
		res, err := bench.FixedRate{Rate: cfg.Rate, Count: n, Clock: Clock}.Run(ctx, src.roundRobin(senders, cfg.Sent))
		return res.Sent, err
	}
	var budget atomic.Int64
	budget.Store(n)
	sent, err := produceAll(ctx, cfg, senders, &budget)
	if err == nil && sent < n {
		err = ctx.Err()
	}
	return sent, err
}

// Each sends one message per Send on s, as fast as s takes them, for
// cfg.Duration. The intended send time is a clock read every 64 messages,
// as MaxRate reads it. It returns how many were sent; it stops early when a
// send fails (that error; ctx's end fails the Send).
func Each(ctx context.Context, cfg Config, s *transport.Sender) (int64, error) {
	if err := cfg.check(1); err != nil {
		return 0, err
	}
	src := newPayloads(cfg.Size, 1, cfg.Shift)
	end := bench.Now() + int64(cfg.Duration)
	var now int64
	for i := int64(0); ; i++ {
		if i&63 == 0 {
			if now = bench.Now(); now >= end {
				return i, nil
			}
		}
		if err := src.send(ctx, s, 0, now); err != nil {
			return i, err
		}
	}
}

// burst is how many messages MaxRate hands a sender per visit, and how
// many messages and visits a clock reading serves.
const burst = 64

// MaxRate sends as fast as the transport takes messages, for cfg.Duration
// or until ctx ends, and returns how many the senders took. cfg.Producers
// goroutines visit their senders in turn, sending up to 64 messages to each
// that has credit (one with TrySend, then the rest as a run with
// TrySendRun, as an engine emits its output), so one slow channel does not
// hold back the others; when none has credit they wait for an
// acknowledgement to free some. A message's intended send time is a clock
// read at most 128 messages and visits before it (microseconds). The end
// of ctx or of the duration is not an error; a failed send is. The
// senders may belong to several peers: a producer none of whose senders
// had credit waits for an acknowledgement from the peer of its first one
// (with the load spread evenly, the peers' credit comes back alike).
func MaxRate(ctx context.Context, cfg Config, senders []*transport.Sender) (int64, error) {
	if err := cfg.check(len(senders)); err != nil {
		return 0, err
	}
	dctx, cancel := context.WithDeadline(ctx, time.Now().Add(cfg.Duration))
	defer cancel()
	return produceAll(dctx, cfg, senders, nil)
}

// produceAll runs cfg.Producers producers over senders until ctx ends or,
// when budget is not nil, until they have sent the budget's messages
// between them. It returns how many they sent.
func produceAll(ctx context.Context, cfg Config, senders []*transport.Sender, budget *atomic.Int64) (int64, error) {
	producers := min(len(senders), max(1, cfg.Producers))
	var total atomic.Int64
	var wg sync.WaitGroup
	errs := make([]error, producers)
	for p := range producers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []int
			for i := p; i < len(senders); i += producers {
				mine = append(mine, i)
			}
			n, err := produce(ctx, cfg, senders, mine, budget)
			total.Add(n)
			errs[p] = err
		}()
	}
	wg.Wait()
	return total.Load(), errors.Join(errs...)
}

// claim takes up to want messages from budget and returns how many it
// took.
func claim(budget *atomic.Int64, want int) int {
	for {
		left := budget.Load()
		k := min(left, int64(want))
		if k <= 0 {
			return 0
		}
		if budget.CompareAndSwap(left, left-k) {
			return int(k)
		}
	}
}

// produce is one of MaxRate's and Count's producers, sending to the senders
// numbered mine until ctx ends or budget (nil: no limit) runs out. It
// returns how many it sent.
func produce(ctx context.Context, cfg Config, senders []*transport.Sender, mine []int, budget *atomic.Int64) (int64, error) {
	peer := senders[mine[0]].Peer()
	src := newPayloads(cfg.Size, len(senders), cfg.Shift)
	run := src.newRun(burst - 1)
	var n int64
	// held is what this producer may still send: a run's worth at every
	// visit without a budget; with one, messages it claimed and keeps
	// across visits until sent, so that visits finding no credit touch no
	// shared counter.
	held := 0
	now, stamped := bench.Now(), 0
	for ctx.Err() == nil {
		mark := peer.CreditMark()
		progressed := false
		for _, ch := range mine {
			if budget == nil {
				held = burst
			} else if held == 0 {
				if held = claim(budget, burst); held == 0 {
					return n, nil
				}
			}
			// The clock is read again once 64 messages and visits have
			// passed: reading it for each message, or for each of the many
			// visits that find no credit, cost the producers a tenth of
			// the CPU.
			if stamped++; stamped >= burst {
				now, stamped = bench.Now(), 0
			}
			// One message first: most visits find no credit, and stamping
			// a whole run for them would be wasted.
			k, err := 0, senders[ch].TrySend(now, src.next(ch, now))
			if err == nil {
				src.sent(ch, 1)
				k = 1
				if rest := run[:held-1]; len(rest) > 0 {
					src.stamp(rest, ch, now)
					var more int
					more, err = senders[ch].TrySendRun(rest)
					src.sent(ch, more)
					k += more
				}
			}
			held -= k
			if err != nil && !errors.Is(err, transport.ErrNoCredit) {
				return n, err
			}
			if k > 0 && cfg.Sent != nil {
				cfg.Sent.Add(int64(k))
			}
			n += int64(k)
			stamped += k
			progressed = progressed || k > 0
			if n&1023 == 0 && ctx.Err() != nil {
				return n, nil
			}
		}
		if !progressed {
			if err := peer.WaitCredit(ctx, mark); err != nil && ctx.Err() == nil {
				return n, err
			}
			now, stamped = bench.Now(), 0
		}
	}
	return n, nil
}
