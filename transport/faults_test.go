package transport

import (
	"bytes"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/wire"
)

// frameOf is a frame of type t whose body names it: i, as one byte.
func frameOf(t wire.FrameType, i int) []byte {
	b, start := wire.BeginFrame(nil, t, 0)
	return wire.FinishFrame(append(b, byte(i)), start)
}

// The fault link cuts each write into frames and sends each as many times
// as its model says; what it drops and duplicates is what its counters
// say, frame types it must not touch pass once, in order, and nothing
// passes through changed before it is armed.
func TestTheFaultLinkDropsAndDuplicatesWholeFramesAsItCounts(t *testing.T) {
	var n faultCounters
	rec := &recLink{}
	l := newFaultLink(rec, newFaultModel(Faults{Drop: 0.3, CtrlDrop: 0.3, Dup: 0.2, Seed: 5}, 1, &n, nil),
		func() int64 { return 0 }, nil, nil)

	preface := []byte("not a frame")
	if _, err := l.Write(preface); err != nil || !bytes.Equal(rec.wrote, preface) {
		t.Fatalf("before arm: wrote %q (err %v), want the bytes as given", rec.wrote, err)
	}
	rec.wrote = nil
	l.arm()

	types := []wire.FrameType{wire.FrameData, wire.FrameAckRequest, wire.FrameAck, wire.FramePing,
		wire.FramePong, wire.FrameOpen, wire.FrameClose, wire.FrameGoAway}
	var sent []wire.FrameType
	for i := range 80 { // 240 frames, each numbered by one byte
		// Two frames in one slice, one in the next: frames, not slices,
		// are what the model judges.
		a, b, c := types[i%len(types)], types[(i+3)%len(types)], types[(i+5)%len(types)]
		sent = append(sent, a, b, c)
		one := append(frameOf(a, len(sent)-3), frameOf(b, len(sent)-2)...)
		if _, err := l.Writev([][]byte{one, frameOf(c, len(sent)-1)}); err != nil {
			t.Fatal(err)
		}
	}

	var got []int
	for off := 0; off < len(rec.wrote); {
		f, k, err := wire.DecodeFrame(rec.wrote[off:], 0)
		if err != nil {
			t.Fatalf("at %d of the output: %v", off, err)
		}
		if f.Type != sent[f.Body[0]] {
			t.Fatalf("frame %d came out as %v, was sent as %v", f.Body[0], f.Type, sent[f.Body[0]])
		}
		got = append(got, int(f.Body[0]))
		off += k
	}
	copies := make([]int, len(sent))
	last := -1
	for _, i := range got {
		if i < last {
			t.Fatalf("frame %d came out after frame %d", i, last)
		}
		last = i
		copies[i]++
	}
	var dropData, dropCtrl, dup uint64
	for i, k := range copies {
		switch tp := sent[i]; {
		case k == 2:
			dup++
		case k == 0 && tp == wire.FrameData:
			dropData++
		case k == 0:
			dropCtrl++
		}
		if k != 1 && (sent[i] == wire.FrameOpen || sent[i] == wire.FrameClose || sent[i] == wire.FrameGoAway) {
			t.Errorf("a %v frame came out %d times; the model must not touch it", sent[i], k)
		}
	}
	s := n.snapshot()
	if s.DataDropped != dropData || s.CtrlDropped != dropCtrl || s.Duplicated != dup {
		t.Errorf("counters %+v; the output shows %d data and %d control frames dropped, %d duplicated", s, dropData, dropCtrl, dup)
	}
	if dropData == 0 || dropCtrl == 0 || dup == 0 {
		t.Errorf("dropped %d data and %d control frames, duplicated %d: want some of each", dropData, dropCtrl, dup)
	}
}

// A node that injects faults writes through its fault link only: its
// connections make no direct writes, which would bypass it.
func TestAConnectionWithFaultsHasNoDirectWrites(t *testing.T) {
	n := testNode(t, WithFaults(Faults{Drop: 0.1, Seed: 1}))
	c := newConn(n, nil, 0)
	c.setLink(&recLink{}, 0) // fd 0 would be duplicated for direct writes
	if c.faults == nil || c.lk != link(c.faults) {
		t.Fatal("the link is not wrapped in a fault link")
	}
	if c.fd >= 0 {
		t.Errorf("direct writes are enabled on fd %d", c.fd)
	}
}

func TestParseFaultsReadsEveryKindAndWritesItBack(t *testing.T) {
	s := "drop=0.05,ctrldrop=0.02,dup=0.01,reset=2s,delay=2ms,jitter=1ms,bw=10MB,ge=0.01:0.3:0.5,partition=3s@5s,crash=1s"
	f, rest, err := ParseFaults(s, 7)
	if err != nil {
		t.Fatal(err)
	}
	want := Faults{Drop: 0.05, CtrlDrop: 0.02, Dup: 0.01, Reset: 2 * time.Second, Delay: 2 * time.Millisecond,
		Jitter: time.Millisecond, Bandwidth: 10_000_000, GE: GilbertElliott{P: 0.01, R: 0.3, LossBad: 0.5},
		PartitionAt: 5 * time.Second, PartitionFor: 3 * time.Second, Seed: 7}
	if f != want {
		t.Errorf("parsed %+v, want %+v", f, want)
	}
	if len(rest) != 1 || rest[0] != "crash=1s" {
		t.Errorf("rest %q, want the engine's crash=1s", rest)
	}
	back, _, err := ParseFaults(f.String(), 7)
	if err != nil || back != f {
		t.Errorf("String() = %q reads back as %+v (%v), want %+v", f.String(), back, err, f)
	}
	for in, bw := range map[string]int64{"512KiB": 512 << 10, "1GB/s": 1e9, "300": 300, "2.5MiB": 5 << 19} {
		if f, _, err := ParseFaults("bw="+in, 0); err != nil || f.Bandwidth != bw {
			t.Errorf("bw=%s: %d (%v), want %d", in, f.Bandwidth, err, bw)
		}
	}
	if f, _, _ := ParseFaults("ge=0.1:0.2", 0); f.GE != (GilbertElliott{P: 0.1, R: 0.2, LossBad: 1}) {
		t.Errorf("ge=0.1:0.2 is %+v, want Gilbert's model (loss 1 in the bad state, 0 in the good)", f.GE)
	}
}

func TestParseFaultsRefusesBadFaults(t *testing.T) {
	for _, s := range []string{
		"delay", "delay=fast", "delay=-1ms", "jitter=-1ms", "bw=lots", "bw=0", "bw=-5MB", "bw=10XB",
		"ge=0.1", "ge=0.1:0.2:0.3:0.4:0.5", "ge=0.1:x", "ge=1.5:0.5", "ge=0.1:0", "ge=0.1:0.2:-1",
		"partition=3s", "partition=3s@", "partition=0s@1s", "partition=x@1s", "partition=1s@-1s", "drop=1",
		"drop=NaN", "ge=NaN:0.5", "bw=NaN", "bw=+InfMB",
	} {
		if _, _, err := ParseFaults(s, 0); err == nil {
			t.Errorf("ParseFaults(%q) accepted it", s)
		}
	}
}

// untimedLink is a recLink whose Execute does nothing: the fault link's
// real timer calls it, from its own goroutine, while the test moves a clock
// of its own and releases frames itself.
type untimedLink struct{ *recLink }

func (untimedLink) Execute(loopFunc) error { return nil }

// clockLink is a fault link over a recLink with a clock the test moves: it
// writes frames numbered by their body's byte and records when each came
// out.
type clockLink struct {
	t     *testing.T
	now   int64
	rec   *recLink
	l     *faultLink
	n     faultCounters
	at    map[int]int64 // frame number -> when it came out
	order []int
	read  int // bytes of rec.wrote already looked at
}

func newClockLink(t *testing.T, f Faults) *clockLink { return newClockLinkOn(t, f, nil) }

// newClockLinkOn is newClockLink with its timed faults on the node's
// schedule sched, which other links may share.
func newClockLinkOn(t *testing.T, f Faults, sched *faultSchedule) *clockLink {
	c := &clockLink{t: t, rec: &recLink{}, at: map[int]int64{}}
	c.l = newFaultLink(untimedLink{c.rec}, newFaultModel(f, 1, &c.n, sched), func() int64 { return c.now }, func() {}, func() {})
	c.l.arm()
	t.Cleanup(c.l.stop)
	return c
}

// write writes frame i of type t with a body of size bytes (at least 1).
func (c *clockLink) write(tp wire.FrameType, i, size int) {
	b, start := wire.BeginFrame(nil, tp, 0)
	b = append(b, byte(i))
	b = append(b, make([]byte, size-1)...)
	if _, err := c.l.Write(wire.FinishFrame(b, start)); err != nil {
		c.t.Fatal(err)
	}
	c.collect()
}

// advance moves the clock to now and runs the release the timer would.
func (c *clockLink) advance(now int64) {
	c.now = now
	c.l.release()
	c.collect()
}

func (c *clockLink) collect() {
	for c.read < len(c.rec.wrote) {
		f, k, err := wire.DecodeFrame(c.rec.wrote[c.read:], 0)
		if err != nil {
			c.t.Fatalf("the output at %d: %v", c.read, err)
		}
		i := int(f.Body[0])
		if _, ok := c.at[i]; !ok {
			c.at[i] = c.now
		}
		c.order = append(c.order, i)
		c.read += k
	}
}

func (c *clockLink) checkInOrder(n int) {
	c.t.Helper()
	if len(c.order) != n {
		c.t.Fatalf("%d frames came out, want %d", len(c.order), n)
	}
	for k, i := range c.order {
		if i != k {
			c.t.Fatalf("frame %d came out %dth: out of order", i, k)
		}
	}
}

// Delayed frames come out no sooner than Delay-Jitter after they were
// written and no later than Delay+Jitter after (or after the frame before
// them), all in order; they are on the wire, not unwritten, as a real
// link's would be.
func TestDelayedFramesComeOutLateAndInOrder(t *testing.T) {
	const delay, jitter = int64(2 * time.Millisecond), int64(time.Millisecond)
	c := newClockLink(t, Faults{Delay: time.Duration(delay), Jitter: time.Duration(jitter), Seed: 3})
	written := map[int]int64{}
	const frames, step = 200, int64(100 * time.Microsecond)
	for i := range frames {
		c.now = int64(i) * step
		written[i] = c.now
		c.write(wire.FrameData, i, 10)
		if c.l.held.empty() {
			t.Fatalf("frame %d was not held", i)
		}
		if b := c.l.OutboundBuffered(); b != 0 {
			t.Fatalf("%d delayed bytes count as unwritten", b)
		}
	}
	for now := c.now; !c.l.held.empty(); now += step / 10 {
		c.advance(now)
	}
	c.checkInOrder(frames)
	var spread, prevOut int64
	for i := range frames {
		out, in := c.at[i], written[i]
		if out < in+delay-jitter {
			t.Errorf("frame %d out %v after it was written, before the least delay %v", i, time.Duration(out-in), time.Duration(delay-jitter))
		}
		// The release runs every step/10 here; a frame waits for the one
		// before it.
		if latest := max(in+delay+jitter, prevOut) + step/10; out > latest {
			t.Errorf("frame %d out %v after it was written, later than the jitter allows", i, time.Duration(out-in))
		}
		spread = max(spread, out-in)
		prevOut = out
	}
	if spread <= delay {
		t.Errorf("no frame waited more than the delay (%v): no jitter", time.Duration(spread))
	}
	if got := c.n.snapshot().Delayed; got != frames {
		t.Errorf("Delayed %d, want %d", got, frames)
	}
}

// Under a bandwidth cap the bytes out by any time are at most the rate's
// worth plus the bucket's burst (and the frame in progress); everything
// comes out in order, and the bytes held back are counted, and count as
// unwritten until they leave.
func TestTheBandwidthCapPacesBytesOut(t *testing.T) {
	const rate = 1_000_000 // 1 MB/s: 1 byte per µs
	c := newClockLink(t, Faults{Bandwidth: rate, Seed: 1})
	const frames, size = 100, 1000 // 100 KB at once: 10 KB pass in the burst, the rest over 90 ms
	for i := range frames {
		c.write(wire.FrameData, i, size)
	}
	if b := c.l.OutboundBuffered(); b == 0 || b != c.l.held.bytes() {
		t.Fatalf("%d bytes unwritten, %d held: want all the held bytes unwritten", b, c.l.held.bytes())
	}
	frame := int64(wire.HeaderLen + size)
	burst := int64(rate) * int64(BurstTime) / int64(time.Second)
	for now := int64(0); !c.l.held.empty(); now += int64(time.Millisecond) {
		c.advance(now)
		if b := c.l.OutboundBuffered(); b != c.l.held.bytes() {
			t.Fatalf("at %v: %d bytes unwritten, %d held: without a delay every held frame is unwritten", time.Duration(now), b, c.l.held.bytes())
		}
		allowed := int64(rate)*now/int64(time.Second) + burst + frame
		if out := int64(len(c.rec.wrote)); out > allowed {
			t.Fatalf("at %v: %d bytes out, the cap allows %d", time.Duration(now), out, allowed)
		}
	}
	c.checkInOrder(frames)
	last := c.at[frames-1]
	if want := int64(frames*frame-burst) * int64(time.Second) / rate; last < want-int64(2*time.Millisecond) {
		t.Errorf("the last frame went out at %v; 1 MB/s takes %v", time.Duration(last), time.Duration(want))
	}
	if th := c.n.snapshot().Throttled; th == 0 || th > uint64(frames*frame) {
		t.Errorf("Throttled %d bytes, want some of the %d", th, frames*frame)
	}
}

// The Gilbert-Elliott model loses frames in bursts: the runs of lost frames
// are as long as 1/R on average, where independent loss at the same rate
// has runs barely longer than one frame; the share lost is P/(P+R).
func TestGilbertElliottLosesInBursts(t *testing.T) {
	const frames = 200_000
	run := func(f Faults) (lost uint64, meanRun float64, n *faultCounters) {
		n = new(faultCounters)
		m := newFaultModel(f, 1, n, nil)
		runs, in := 0, false
		for range frames {
			k, _, _ := m.fate(0, wire.FrameData, 100)
			if k == 0 {
				lost++
				if !in {
					runs++
				}
			}
			in = k == 0
		}
		return lost, float64(lost) / float64(runs), n
	}
	ge := GilbertElliott{P: 0.01, R: 0.2, LossBad: 1}
	lost, meanRun, n := run(Faults{GE: ge, Seed: 9})
	share := float64(lost) / frames
	if want := ge.P / (ge.P + ge.R); share < want*0.85 || share > want*1.15 {
		t.Errorf("lost %.4f of the frames, want about P/(P+R) = %.4f", share, want)
	}
	if want := 1 / ge.R; meanRun < want*0.85 || meanRun > want*1.15 {
		t.Errorf("bursts of %.2f frames on average, want about 1/R = %.1f", meanRun, want)
	}
	if s := n.snapshot(); s.GEDropped != lost || s.DataDropped != 0 {
		t.Errorf("counters %+v; %d frames were lost, all by the chain", s, lost)
	}
	_, bernoulliRun, _ := run(Faults{Drop: share, Seed: 9})
	if bernoulliRun > 1.2 {
		t.Errorf("independent loss at the same rate has bursts of %.2f frames; the comparison is off", bernoulliRun)
	}
}

// A partition holds every frame written during it, of every type, until it
// heals, then they go out in order; frames written before it pass at once.
// Peek shows nothing of the inbound bytes while it lasts, and the link reads
// them when it heals.
func TestAPartitionHoldsEverythingUntilItHeals(t *testing.T) {
	const start, length = int64(time.Second), int64(3 * time.Second)
	c := newClockLink(t, Faults{PartitionAt: time.Duration(start), PartitionFor: time.Duration(length)})
	inbound := []byte("inbound bytes")
	c.rec.in = inbound
	healed := 0
	c.l.onHeal = func() { healed++ }

	c.write(wire.FrameData, 0, 10)
	if b, _ := c.l.Peek(-1); !bytes.Equal(b, inbound) {
		t.Fatalf("before the partition Peek shows %q", b)
	}
	types := []wire.FrameType{wire.FrameData, wire.FrameOpen, wire.FrameAck, wire.FramePing, wire.FrameClose, wire.FrameGoAway}
	for i, tp := range types {
		c.now = start + int64(i)*int64(100*time.Millisecond)
		c.write(tp, i+1, 10)
		if b, _ := c.l.Peek(-1); len(b) != 0 {
			t.Fatalf("during the partition Peek shows %q", b)
		}
	}
	c.advance(start + length - 1)
	if len(c.order) != 1 {
		t.Fatalf("%d frames out before the heal, want the one written before the partition", len(c.order))
	}
	c.advance(start + length)
	c.checkInOrder(1 + len(types))
	for i := 1; i <= len(types); i++ {
		if c.at[i] != start+length {
			t.Errorf("frame %d out at %v, want the heal at %v", i, time.Duration(c.at[i]), time.Duration(start+length))
		}
	}
	c.l.heal() // what the timer Peek set runs on the loop
	if b, _ := c.l.Peek(-1); healed != 1 || !bytes.Equal(b, inbound) {
		t.Errorf("after the heal: read %d times, Peek shows %q", healed, b)
	}
	if s := c.n.snapshot(); s.PartitionHeld != uint64(len(types)) || s.PartitionReads != 1 {
		t.Errorf("counters %+v; want %d frames held and one read put off", s, len(types))
	}
}

// On a deferred fault clock the partition begins PartitionAt after the
// clock starts, however long after the node that is: before, frames pass
// and the inbound bytes are read even where a clock started with the node
// would have had the partition; after, it holds as one timed from the
// node's start does. A connection made before the clock started (this
// link's model was) is cut off all the same.
func TestAPartitionOnADeferredFaultClockBeginsAfterTheClockStarts(t *testing.T) {
	const at, length, started = int64(time.Second), int64(3 * time.Second), int64(5 * time.Second)
	var sched faultSchedule
	sched.from.Store(faultClockStopped)
	f := Faults{PartitionAt: time.Duration(at), PartitionFor: time.Duration(length)}
	c := newClockLinkOn(t, f, &sched)
	inbound := []byte("inbound bytes")
	c.rec.in = inbound

	c.now = at + length/2 // inside a partition timed from the node's start
	c.write(wire.FrameData, 0, 10)
	if b, _ := c.l.Peek(-1); len(c.order) != 1 || !bytes.Equal(b, inbound) {
		t.Fatalf("before the clock started: %d frames out (want 1 at once), Peek shows %q", len(c.order), b)
	}
	c.now = started
	if !sched.startClock(started) || sched.startClock(started+1) {
		t.Fatal("a stopped clock starts once, at the first call")
	}
	c.now = started + at - 1
	c.write(wire.FrameData, 1, 10)
	if len(c.order) != 2 {
		t.Fatalf("%d frames out just before the partition, want both at once", len(c.order))
	}
	c.now = started + at
	c.write(wire.FramePing, 2, 10)
	if b, _ := c.l.Peek(-1); len(b) != 0 {
		t.Fatalf("during the partition Peek shows %q", b)
	}
	c.advance(started + at + length - 1)
	if len(c.order) != 2 {
		t.Fatalf("%d frames out before the heal, want the 2 written before the partition", len(c.order))
	}
	c.advance(started + at + length)
	c.checkInOrder(3)
	if s := c.n.snapshot(); s.PartitionHeld != 1 || s.PartitionReads != 1 {
		t.Errorf("counters %+v; want the one frame written during the partition held and one read put off", s)
	}
	if got := sched.partitionTime(f, started+at+length/2); got != time.Duration(length/2) {
		t.Errorf("partitionTime half way through is %v", got)
	}
}

// The partition begins with the node's first write or read once
// PartitionAt has passed, on whichever of its connections, and lasts
// PartitionFor from then: a node that was not scheduled while a partition
// timed by the clock alone lasted did no I/O during it, and the partition
// held nothing (a loaded machine's transport run). From its beginning
// every connection of the node is cut off.
func TestAPartitionBeginsWithTheFirstWriteOrReadOnceItIsDue(t *testing.T) {
	const at, length, first = int64(time.Second), int64(3 * time.Second), int64(2 * time.Second)
	f := Faults{PartitionAt: time.Duration(at), PartitionFor: time.Duration(length)}
	for _, read := range []bool{false, true} {
		var sched faultSchedule
		a, b := newClockLinkOn(t, f, &sched), newClockLinkOn(t, f, &sched)
		a.rec.in, b.rec.in = []byte("inbound bytes"), []byte("inbound bytes")
		if pt := sched.partitionTime(f, first); pt != 0 {
			t.Fatalf("partitionTime %v at %v, before any I/O since the partition was due", pt, time.Duration(first))
		}
		a.now, b.now = first, first+1 // nothing since at: the node was not running
		if read {
			if got, _ := a.l.Peek(-1); len(got) != 0 {
				t.Fatalf("the first read since the partition was due shows %q", got)
			}
		} else {
			a.write(wire.FrameData, 0, 10)
		}
		b.write(wire.FrameData, 0, 10)
		if got, _ := b.l.Peek(-1); len(got) != 0 {
			t.Fatalf("once the partition began on another connection, Peek shows %q", got)
		}
		for _, c := range []*clockLink{a, b} {
			c.advance(first + length - 1)
			if len(c.order) != 0 {
				t.Fatalf("a frame came out at %v, in the partition", time.Duration(c.at[0]))
			}
			c.advance(first + length)
		}
		b.checkInOrder(1)
		if s := a.n.snapshot().Add(b.n.snapshot()); s.PartitionHeld+s.PartitionReads < 2 || s.PartitionHeld == 0 {
			t.Errorf("began by a %s: counters %+v; want what was written held and what was read put off", map[bool]string{true: "read", false: "write"}[read], s)
		}
		if pt := sched.partitionTime(f, first+length/2); pt != time.Duration(length/2) {
			t.Errorf("partitionTime %v half way through the partition", pt)
		}
	}
}

// A node made with WithDeferredFaultClock resets no connection before its
// clock starts, though Reset is due many times over on the node's own
// clock, and starts resetting once it does; its Stats show none of the
// partition before then. StartFaultClock starts the clock once, and not
// that of a node whose clock started with it.
func TestADeferredFaultClockHoldsTheTimedFaultsUntilItStarts(t *testing.T) {
	rx := listeningNode(t, nil)
	tx := testNode(t, WithFaults(Faults{Reset: time.Millisecond, PartitionAt: 0, PartitionFor: time.Hour, Seed: 1}),
		WithDeferredFaultClock(), WithPingInterval(time.Millisecond), WithReconnectBackoff(time.Millisecond, time.Millisecond))
	p, err := tx.Peer(rx.Addr())
	if err != nil {
		t.Fatal(err)
	}
	// Each housekeeping pass (every 20 ms) pings the connection, which
	// this waits to see answered on one connection three times: passes in
	// which a clock that had started would have reset it.
	deadline := time.Now().Add(20 * time.Second)
	for o, ok := p.ClockOffset(); !ok || o.Samples < 3; o, ok = p.ClockOffset() {
		if r := tx.Stats().Faults.Resets; r > 0 {
			t.Fatalf("%d connections reset before the fault clock started", r)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no three round trips on one connection in 20 s (resets %d)", tx.Stats().Faults.Resets)
		}
		time.Sleep(time.Millisecond)
	}
	if f := tx.Stats().Faults; f.Resets != 0 || f.PartitionTime != 0 || f.PartitionHeld != 0 {
		t.Fatalf("before the fault clock started: %+v, want no reset and nothing of the partition", f)
	}
	if !tx.StartFaultClock() || tx.StartFaultClock() {
		t.Fatal("StartFaultClock starts a deferred clock once, at the first call")
	}
	for tx.Stats().Faults.Resets == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no reset in 20 s after the fault clock started")
		}
		time.Sleep(time.Millisecond)
	}
	if rx.StartFaultClock() {
		t.Error("StartFaultClock started the clock of a node made without WithDeferredFaultClock")
	}
}

// Any fault string ParseFaults accepts is written back by String as one it
// reads to the same faults; nothing it is given panics it.
func FuzzParseFaults(f *testing.F) {
	for _, s := range []string{
		"", "drop=0.05,ctrldrop=0.05,dup=0.01,reset=2s", "delay=2ms,jitter=1ms,bw=10MB,partition=3s@5s",
		"ge=0.01:0.3:0.5", "ge=0.1:0.2", "bw=512KiB/s", "crash=1s,kill=3s,drop=0.02", "partition=1s@0s",
		"drop=x", "bw=", "ge=::", "partition=@", "=", ",", "delay=-1s",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, rest, err := ParseFaults(s, 3)
		if err != nil {
			return
		}
		back, rest2, err := ParseFaults(got.String(), 3)
		if err != nil || back != got || len(rest2) != 0 {
			t.Fatalf("%q parsed as %+v (rest %q), written as %q, read back as %+v, %q, %v", s, got, rest, got.String(), back, rest2, err)
		}
	})
}

// TestResetsCountOnlyTheConnectionsAResetBroke closes the connection an
// injected reset chose before the reset reaches it, as its peer, a timeout
// or a shutdown may: nothing was injected into it, and Resets, which a
// fault test reads to know that its resets happened, must not count it.
func TestResetsCountOnlyTheConnectionsAResetBroke(t *testing.T) {
	rx := listeningNode(t, nil)
	tx := testNode(t, WithFaults(Faults{Reset: time.Millisecond, Seed: 1}), WithReconnectBackoff(time.Millisecond, time.Millisecond))
	var mu sync.Mutex
	var dialed []*conn
	opened := func(c *conn) {
		if c.node == tx {
			mu.Lock()
			dialed = append(dialed, c)
			mu.Unlock()
		}
	}
	testHookHandshakeOpened.Store(&opened)
	t.Cleanup(func() { testHookHandshakeOpened.Store(nil) })
	chosen := make(chan *conn, 1)
	hook := func(c *conn) {
		testHookResetChosen.Store(nil) // the first reset only
		tx.abort(c, errors.New("closed by the test"))
		chosen <- c
	}
	testHookResetChosen.Store(&hook)
	t.Cleanup(func() { testHookResetChosen.Store(nil) })
	if _, err := tx.Peer(rx.Addr()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-chosen:
	case <-ctxT(t, 20*time.Second).Done():
		t.Fatal("no reset chose a connection")
	}
	// A later reset breaks a redialed connection, for real.
	injected := func() (n uint64) {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range dialed {
			select {
			case <-c.done:
				if errors.Is(c.closeErr, errInjectedReset) {
					n++
				}
			default:
			}
		}
		return n
	}
	for deadline := time.Now().Add(20 * time.Second); injected() == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("no reset broke a connection")
		}
	}
	tx.Abort() // no more resets; every connection has ended
	if got, want := tx.Stats().Faults.Resets, injected(); got != want {
		t.Errorf("Resets counts %d, but %d connections were broken by a reset", got, want)
	}
}
