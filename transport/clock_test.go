package transport

import (
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/wire"
)

// The estimator keeps, of the last clockSamples round trips, the one with
// the shortest: its offset, and half its round trip as the error. It
// forgets older ones, and ignores a PONG whose token lies in the future.
func TestTheClockEstimatorKeepsTheShortestRecentRoundTrip(t *testing.T) {
	var e clockEstimator
	if e.estimate() != nil {
		t.Fatal("an estimate before any sample")
	}
	// The peer is 1000 ahead. Round trips of 100, 20 (the best), then 60s.
	e.add(0, 100, 1000+50)
	e.add(200, 220, 1000+215) // the peer answered 5 after the midpoint
	got := *e.estimate()
	if got.Offset != 1005 || got.Error != 10 || got.Samples != 2 {
		t.Errorf("estimate %+v, want offset 1005 within 10 from the 20-long round trip", got)
	}
	e.add(300, 250, 0) // t4 before t1: not ours
	if e.estimate().Samples != 2 {
		t.Error("a round trip that ended before it began was counted")
	}
	for i := range clockSamples - 1 {
		at := int64(1000 + 100*i)
		e.add(at, at+60, at+30+1000)
	}
	if got := *e.estimate(); got.Error != 10 {
		t.Errorf("with the best sample among the last %d: %+v, want it kept", clockSamples, got)
	}
	e.add(5000, 5060, 5030+1000)
	if got := *e.estimate(); got.Offset != 1000 || got.Error != 30 {
		t.Errorf("after the best sample aged out: %+v, want offset 1000 within 30", got)
	}
}

// Two nodes whose clocks disagree (one is given an offset, as a host with
// a wrong clock would be) each estimate the other's offset from their PING
// round trips, to within the error they state; and a one-way latency
// computed from the sender's timestamps is off by the offset raw and right,
// within the error, once corrected.
func TestClockOffsetsAreFoundAndCorrectOneWayLatency(t *testing.T) {
	for _, theta := range []time.Duration{250 * time.Millisecond, -3 * time.Second} {
		t.Run(theta.String(), func(t *testing.T) { testClockOffset(t, theta) })
	}
}

func testClockOffset(t *testing.T, theta time.Duration) {
	ping := WithPingInterval(10 * time.Millisecond)
	rx, tx, p := newPair(t, []Option{ping, WithClockOffset(theta)}, []Option{ping})
	ctx := ctxT(t, 20*time.Second)

	var fromTx, fromRx ClockOffset
	for {
		var ok1, ok2 bool
		fromTx, ok1 = p.ClockOffset()
		fromRx, ok2 = rx.ClockOffset(tx.ID())
		if ok1 && ok2 && fromTx.Samples >= clockSamples && fromRx.Samples >= clockSamples {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no estimates after 20 s: %+v, %+v", fromTx, fromRx)
		case <-time.After(10 * time.Millisecond):
		}
	}
	// Both nodes anchor their clocks to this process's wall clock, so the
	// true offsets are theta and -theta (to within the nanoseconds between
	// the two nodes' readings of it).
	const slack = time.Microsecond
	if d := (fromTx.Offset - theta).Abs(); d > fromTx.Error+slack || fromTx.Error > theta.Abs()/4 {
		t.Errorf("the sender estimates the receiver %v ahead ± %v; it is %v ahead", fromTx.Offset, fromTx.Error, theta)
	}
	if d := (fromRx.Offset + theta).Abs(); d > fromRx.Error+slack || fromRx.Error > theta.Abs()/4 {
		t.Errorf("the receiver estimates the sender %v ahead ± %v; it is %v ahead", fromRx.Offset, fromRx.Error, -theta)
	}
	t.Logf("offset %v: the sender estimates %v ± %v, the receiver %v ± %v", theta, fromTx.Offset, fromTx.Error, fromRx.Offset, fromRx.Error)
	if s := tx.Stats().Peers[0].Clock; s == nil || s.Samples < fromTx.Samples {
		t.Errorf("PeerStats.Clock %+v, want the peer's estimate (%+v or a later one)", s, fromTx)
	}

	// One-way latency. The process's monotonic clock is the truth both
	// sides share; each timestamp is taken with a reading of it right
	// before and after, and retried if they lie apart.
	t0 := time.Now()
	stamp := func(n *Node) (clock int64, mono time.Duration) {
		for {
			a := time.Since(t0)
			clock = n.Clock()
			if b := time.Since(t0); b-a < 50*time.Microsecond {
				return clock, a + (b-a)/2
			}
		}
	}
	type sample struct{ raw, corrected, truth time.Duration }
	var mu sync.Mutex
	var samples []sample
	var bound time.Duration
	done := make(chan struct{})
	target := taskid.ID{Processor: 1}
	rx.HandleInline(target, func(_ taskid.Channel, _ uint64, msgs []Message) {
		now, mono := stamp(rx)
		off, _ := rx.ClockOffset(tx.ID())
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			ts := int64(binary.LittleEndian.Uint64(m.Payload))
			sent := time.Duration(binary.LittleEndian.Uint64(m.Payload[8:]))
			raw := time.Duration(now - ts)
			samples = append(samples, sample{raw, raw + off.Offset, mono - sent})
			bound = max(bound, off.Error)
		}
		if len(samples) == 100 {
			close(done)
		}
	})
	s, err := p.OpenSender(ctx, taskid.ID{}, target)
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		clock, mono := stamp(tx)
		b := binary.LittleEndian.AppendUint64(nil, uint64(clock))
		b = binary.LittleEndian.AppendUint64(b, uint64(mono))
		if err := s.Send(ctx, 0, b); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the messages did not arrive")
	}
	mu.Lock()
	defer mu.Unlock()
	const readSlack = 50 * time.Microsecond // the stamps' own uncertainty, each side
	for i, x := range samples {
		if d := (x.corrected - x.truth).Abs(); d > bound+2*readSlack {
			t.Fatalf("message %d: corrected latency %v, true %v: off by more than the bound %v", i, x.corrected, x.truth, bound)
		}
		if d := (x.raw - x.truth - theta).Abs(); d > 2*readSlack {
			t.Fatalf("message %d: raw latency %v, true %v: want it off by the offset %v", i, x.raw, x.truth, theta)
		}
	}
}

// A peer that predates clock PONGs answers a PING with an 8-byte PONG and
// sends PINGs without PingClock: the node keeps the connection, learns no
// clock from it, and answers its PINGs with 8-byte PONGs; a PING with
// PingClock gets the node's clock.
func TestClockPongsAreCompatibleWithPeersThatPredateThem(t *testing.T) {
	ln, tx, p := rawPeerListener(t)
	nc, r := acceptRawPeer(t, ln)
	f := readAnyFrame(t, r)
	if f.Type != wire.FramePing || f.Flags&wire.PingClock == 0 {
		t.Fatalf("the first frame is %v with flags %#x, want a PING asking for the clock", f.Type, f.Flags)
	}
	v, _ := wire.ParsePing(f.Body)
	out := wire.AppendPong(nil, wire.Pong{Value: v}) // the old answer
	out = wire.AppendPing(out, 41, 0)                // an old PING
	out = wire.AppendPing(out, 42, wire.PingClock)   // a new one
	before := tx.Clock()
	if _, err := nc.Write(out); err != nil {
		t.Fatal(err)
	}
	var pongs []wire.Pong
	for len(pongs) < 2 {
		f := readAnyFrame(t, r)
		if f.Type != wire.FramePong {
			continue
		}
		pong, err := wire.ParsePong(f.Flags, f.Body)
		if err != nil {
			t.Fatal(err)
		}
		if want := 8 + 8*int(f.Flags&wire.PongClock); len(f.Body) != want {
			t.Fatalf("a PONG of %d bytes with flags %#x", len(f.Body), f.Flags)
		}
		pongs = append(pongs, pong)
	}
	after := tx.Clock()
	if pongs[0] != (wire.Pong{Value: 41}) {
		t.Errorf("the answer to a PING without PingClock is %+v, want a plain PONG of 41", pongs[0])
	}
	if c := pongs[1]; c.Value != 42 || !c.HasClock || c.Clock < before || c.Clock > after {
		t.Errorf("the answer to a PING with PingClock is %+v, want 42 and a clock in [%d, %d]", c, before, after)
	}
	if c, ok := p.ClockOffset(); ok {
		t.Errorf("a clock estimate %+v from a PONG without a clock", c)
	}
	if !p.Connected() {
		t.Error("the connection went down")
	}
}
