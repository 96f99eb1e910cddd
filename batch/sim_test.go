package batch

import (
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// simParams describe a simulated connection: 100-byte messages arriving every
// gap (exponentially distributed when poisson is set), a socket that writes
// one batch at a time in base + bytes*perByte nanoseconds, for dur.
type simParams struct {
	gap     time.Duration
	poisson bool
	burst   int // if > 0, after every burst messages the next one comes pause later
	pause   time.Duration
	base    time.Duration
	perByte float64
	dur     time.Duration
	seed    uint64
}

type simResult struct {
	messages, batches int
	byCause           [NumCauses]int
	maxLatency        time.Duration // arrival to flush
	maxInflight       int
	maxBatch          int
	minLinger         time.Duration
	maxLingerSeen     time.Duration
	finalLinger       time.Duration
}

const simMsg = 100

// simulate runs the connection's event loop as the transport would: after
// every event (arrival, timer, write completion) it asks the policy, cuts
// batches of whole messages while it says flush, and arms the timer it asks
// for. It fails t on any broken invariant.
func simulate(t *testing.T, cfg Config, sp simParams) simResult {
	t.Helper()
	p := New(cfg)
	r := rand.New(rand.NewPCG(sp.seed, 7))
	const never = math.MaxInt64
	var (
		res         = simResult{minLinger: p.Linger(), maxLingerSeen: p.Linger()}
		arrivals    []int64 // arrival times of waiting messages, oldest first
		completions []int64 // completion times of in-flight writes, oldest first
		socketFree  int64
		timer       int64 = never
		next        int64
		end         = int64(sp.dur)
	)
	nextGap := func() int64 {
		if sp.burst > 0 && res.messages%sp.burst == 0 {
			return int64(sp.pause)
		}
		if sp.poisson {
			return int64(r.ExpFloat64()*float64(sp.gap)) + 1
		}
		return int64(sp.gap)
	}
	for {
		now := int64(never)
		if next < end {
			now = next
		}
		now = min(now, timer)
		if len(completions) > 0 {
			now = min(now, completions[0])
		}
		if now == never {
			break
		}
		switch {
		case len(completions) > 0 && completions[0] == now:
			completions = completions[1:]
			p.WriteDone(now)
		case timer == now:
			timer = never
		default:
			arrivals = append(arrivals, now)
			res.messages++
			next += nextGap()
		}
		for {
			d := p.Decide(now, len(arrivals)*simMsg)
			if !d.Flush {
				timer = never
				if d.WakeAt != 0 {
					if d.WakeAt <= now {
						t.Fatalf("at %d: WakeAt %d is not in the future", now, d.WakeAt)
					}
					timer = d.WakeAt
				}
				break
			}
			n := max(1, min(len(arrivals), cfg.MaxBatchBytes/simMsg))
			for _, a := range arrivals[:n] {
				res.maxLatency = max(res.maxLatency, time.Duration(now-a))
			}
			arrivals = arrivals[n:]
			p.Flushed(now, n*simMsg, d.Cause)
			res.batches++
			res.byCause[d.Cause]++
			res.maxBatch = max(res.maxBatch, n*simMsg)
			socketFree = max(socketFree, now) + int64(sp.base) + int64(float64(n*simMsg)*sp.perByte)
			completions = append(completions, socketFree)
			if p.Inflight() != len(completions) {
				t.Fatalf("at %d: Inflight() = %d, %d writes pending", now, p.Inflight(), len(completions))
			}
			if p.Inflight() > cfg.MaxInflight {
				t.Fatalf("at %d: %d batches in flight, MaxInflight %d", now, p.Inflight(), cfg.MaxInflight)
			}
			res.maxInflight = max(res.maxInflight, p.Inflight())
			if len(arrivals) == 0 {
				p.Decide(now, 0)
				break
			}
		}
		l := p.Linger()
		if l < cfg.MinLinger || l > cfg.MaxLinger {
			t.Fatalf("at %d: linger %v outside [%v, %v]", now, l, cfg.MinLinger, cfg.MaxLinger)
		}
		res.minLinger, res.maxLingerSeen = min(res.minLinger, l), max(res.maxLingerSeen, l)
	}
	if len(arrivals) != 0 {
		t.Fatalf("%d messages never flushed", len(arrivals))
	}
	s := p.Stats()
	if s.Batches != uint64(res.batches) || s.Bytes != uint64(res.messages*simMsg) || s.Inflight != 0 {
		t.Fatalf("Stats %+v disagree with the simulation: %d batches, %d bytes", s, res.batches, res.messages*simMsg)
	}
	res.finalLinger = p.Linger()
	t.Logf("%+v", res)
	return res
}

func TestSimulatedConnection(t *testing.T) {
	const dur = 20 * time.Millisecond // simulated; the whole test runs in ~20 ms
	t.Run("at a low rate every message goes out at once, alone", func(t *testing.T) {
		res := simulate(t, DefaultConfig(), simParams{gap: 100 * time.Microsecond, base: 10 * time.Microsecond, perByte: 1, dur: dur})
		if res.batches != res.messages || res.byCause[CauseIdle] != res.batches || res.maxLatency != 0 {
			t.Fatalf("%+v: want one idle batch per message and no waiting", res)
		}
	})
	t.Run("under load batches grow and data waits no longer than a write", func(t *testing.T) {
		// 0.5 B/ns arriving, the socket writes 2 B/ns after 5 µs per write.
		res := simulate(t, DefaultConfig(), simParams{gap: 200 * time.Nanosecond, base: 5 * time.Microsecond, perByte: 0.5, dur: dur})
		perBatch := float64(res.messages) / float64(res.batches)
		if perBatch < 10 {
			t.Errorf("%+v: %.1f messages per batch, want batching (>= 10)", res, perBatch)
		}
		// The socket keeps up, so a write takes about 5 µs + a batch/2 ns
		// (~7 µs for the ~33 messages that arrive meanwhile): data waits for
		// the write in flight, not for a 50 µs linger.
		if res.maxLatency > 15*time.Microsecond {
			t.Errorf("%+v: a message waited %v", res, res.maxLatency)
		}
		if res.byCause[CauseWriteDone] == 0 {
			t.Errorf("%+v: want write completions to clock the batches", res)
		}
	})
	t.Run("a socket slower than the producers fills every batch and holds MaxInflight", func(t *testing.T) {
		// 1 B/ns arriving, the socket writes 0.5 B/ns.
		res := simulate(t, DefaultConfig(), simParams{gap: 100 * time.Nanosecond, base: time.Microsecond, perByte: 2, dur: dur})
		if res.maxInflight != DefaultMaxInflight {
			t.Errorf("%+v: at most %d in flight, want the limit %d", res, res.maxInflight, DefaultMaxInflight)
		}
		if full := float64(res.byCause[CauseFull]) / float64(res.batches); full < 0.9 {
			t.Errorf("%+v: %.0f%% of batches full, want >= 90%%", res, 100*full)
		}
		// Flushes are clocked by the socket, so the rate the policy sees is
		// its drain rate, 0.5 B/ns: a 64 KiB batch fills in ~131 µs, much less
		// than a write takes when four are queued (~500 µs), so the fill time
		// sets the linger.
		if res.finalLinger < 120*time.Microsecond || res.finalLinger > 145*time.Microsecond {
			t.Errorf("%+v: final linger %v, want the fill time (~131µs)", res, res.finalLinger)
		}
	})
	t.Run("random arrivals keep every invariant", func(t *testing.T) {
		for seed := range uint64(4) {
			simulate(t, DefaultConfig(), simParams{gap: 300 * time.Nanosecond, poisson: true, base: 3 * time.Microsecond, perByte: 0.3, dur: dur / 4, seed: seed})
		}
	})
	t.Run("after a burst the connection is idle again and flushes at once", func(t *testing.T) {
		// Bursts of 500 messages 100 ns apart, 1 ms of silence between them.
		sp := simParams{gap: 100 * time.Nanosecond, burst: 500, pause: time.Millisecond, base: 2 * time.Microsecond, perByte: 0.25, dur: dur}
		res := simulate(t, DefaultConfig(), sp)
		bursts := (res.messages + sp.burst - 1) / sp.burst
		if res.byCause[CauseIdle] != bursts {
			t.Errorf("%+v: %d idle flushes, want one per burst (%d)", res, res.byCause[CauseIdle], bursts)
		}
		if res.batches > res.messages/10 {
			t.Errorf("%+v: %d batches for %d messages, want the bursts batched", res, res.batches, res.messages)
		}
		if res.maxLatency > 20*time.Microsecond {
			t.Errorf("%+v: a message waited %v", res, res.maxLatency)
		}
	})
}
