package lossdetect

import (
	"container/heap"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/window"
)

var simSeeds = flag.Int("sim.seeds", 0, "seeds for TestSimulation (0: 1000, 200 with -short, a tenth of that with -race)")

// The simulation connects sources (window.Sender + Tracker) to one target
// (Receiver + a consumer task with random consumption delays) over a seeded
// link that drops, duplicates, reorders and delays every kind of message and
// sometimes breaks the connection. Time is virtual: an event queue ordered by
// (time, insertion order) makes every run a pure function of its seed.

// simProfile is one seed's fault mix.
type simProfile struct {
	clean      bool    // no faults, no jitter: FIFO and lossless
	dropData   float64 // per data message
	dropCtl    float64 // per OPEN, ACKREQUEST and ACK
	dup        float64 // per message of any kind
	baseDelay  int64
	jitter     int64 // uniform extra delay: reorders
	resets     int   // connection breaks
	zombie     bool  // a second incarnation takes over while the first keeps sending
	rateLimit  int64 // 0: the producer pushes as fast as credit allows; else one message per rateLimit
	messages   int
	maxMsgs    int
	maxBytes   int
	maxPayload int
}

func newProfile(rng *rand.Rand, seed int) simProfile {
	p := simProfile{
		baseDelay:  int64(10+rng.IntN(90)) * int64(time.Microsecond),
		messages:   100 + rng.IntN(300),
		maxMsgs:    2 + rng.IntN(62),
		maxBytes:   512 + rng.IntN(8<<10),
		maxPayload: 1 + rng.IntN(300),
	}
	if seed%10 == 0 {
		p.clean = true
		return p
	}
	p.dropData = rng.Float64() * 0.1
	p.dropCtl = rng.Float64() * 0.1
	p.dup = rng.Float64() * 0.04
	if rng.IntN(3) != 0 { // else in order, like one TCP connection
		p.jitter = int64(rng.IntN(150)) * int64(time.Microsecond)
	}
	p.resets = rng.IntN(3)
	p.zombie = rng.IntN(4) == 0
	if rng.IntN(3) == 0 {
		p.rateLimit = int64(1+rng.IntN(400)) * int64(time.Microsecond)
	}
	return p
}

type pktKind uint8

const (
	pktOpen pktKind = iota
	pktData
	pktReq
	pktAck
)

type pkt struct {
	kind    pktKind
	epoch   uint64
	seq     uint64 // data seq, request seq, or OPEN firstSeq
	payload []byte
	ack     Ack
	conn    int // connection generation it was sent on
}

type evKind uint8

const (
	evToTarget evKind = iota
	evToSource
	evWake    // a source's timer
	evConsume // the consumer finishes one message
	evReset   // the connection breaks
	evStartB  // the second incarnation starts
)

type event struct {
	at    int64
	order uint64
	kind  evKind
	who   int
	p     *pkt
}

type eventQueue []event

func (q eventQueue) Len() int { return len(q) }
func (q eventQueue) Less(i, j int) bool {
	return q[i].at < q[j].at || (q[i].at == q[j].at && q[i].order < q[j].order)
}
func (q eventQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *eventQueue) Push(x any)   { *q = append(*q, x.(event)) }
func (q *eventQueue) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type simSource struct {
	w        *window.Sender
	t        *Tracker
	epoch    uint64
	first    uint64
	produced int
	nextProd int64
	wakeAt   int64
	wakeSet  bool
	started  bool
}

type queued struct {
	epoch, seq uint64
	payload    []byte
}

type sim struct {
	tb       testing.TB
	seed     int
	p        simProfile
	rng      *rand.Rand
	cfg      Config
	wcfg     window.Config
	now      int64
	order    uint64
	q        eventQueue
	conn     int
	downTill int64

	src [2]*simSource // [0] the first incarnation, [1] the second (zombie runs)

	r         *Receiver
	inbox     []queued
	consuming bool
	delivered map[uint64]int // per epoch: messages delivered to the consumer
	maxEpoch  uint64         // highest epoch the receiver has opened
	done      bool

	events, sameInstant int
	slab                []byte
	trace               func(format string, args ...any) // debugging aid, nil in tests
}

// payloadFor is message i of the incarnation with this epoch: its epoch and
// index, then filler whose length and bytes depend on both.
func payloadFor(epoch uint64, i int, maxPayload int) []byte {
	h := epoch*0x9E3779B97F4A7C15 ^ uint64(i)*0xBF58476D1CE4E5B9
	n := 16 + int(h%uint64(maxPayload))
	b := make([]byte, n)
	binary.LittleEndian.PutUint64(b, epoch)
	binary.LittleEndian.PutUint64(b[8:], uint64(i))
	for j := 16; j < n; j++ {
		b[j] = byte(h >> (j % 8 * 8))
	}
	return b
}

func (s *sim) fail(format string, args ...any) {
	s.tb.Helper()
	s.tb.Fatalf("seed %d at %v (profile %+v): %s", s.seed, time.Duration(s.now), s.p, fmt.Sprintf(format, args...))
}

func (s *sim) schedule(at int64, kind evKind, who int, p *pkt) {
	s.order++
	heap.Push(&s.q, event{at: at, order: s.order, kind: kind, who: who, p: p})
}

// transmit puts p on the link in one direction, applying the profile's
// faults.
func (s *sim) transmit(p *pkt, kind evKind, who int) {
	if s.now < s.downTill {
		return // no connection
	}
	drop := s.p.dropCtl
	if p.kind == pktData {
		drop = s.p.dropData
	}
	p.conn = s.conn
	copies := 1
	if s.rng.Float64() < s.p.dup {
		copies = 2
	}
	for range copies {
		if s.rng.Float64() < drop {
			continue
		}
		d := s.p.baseDelay
		if s.p.jitter > 0 {
			d += s.rng.Int64N(s.p.jitter)
		}
		s.schedule(s.now+d, kind, who, p)
	}
}

func (s *sim) toTarget(p *pkt) { s.transmit(p, evToTarget, 0) }

// send carries out a request the Tracker returned.
func (s *sim) sendRequest(req AckRequest) {
	if s.trace != nil {
		s.trace("send %+v", req)
	}
	if req.Open {
		s.toTarget(&pkt{kind: pktOpen, epoch: req.Epoch, seq: req.Seq})
	} else {
		s.toTarget(&pkt{kind: pktReq, epoch: req.Epoch, seq: req.Seq})
	}
}

func (s *sim) wake(i int, at int64) {
	src := s.src[i]
	at = max(at, s.now)
	if !src.wakeSet || at < src.wakeAt {
		src.wakeAt, src.wakeSet = at, true
		s.schedule(at, evWake, i, nil)
	}
}

// pump runs source i's event-loop turn: produce, tick, send, tick, check
// the no-stall invariant, and set its timer.
func (s *sim) pump(i int) {
	src := s.src[i]
	if !src.started {
		return
	}
	if s.now < s.downTill {
		s.wake(i, s.downTill)
		return
	}
	// The producer.
	for src.produced < s.p.messages && s.now >= src.nextProd {
		pl := payloadFor(src.epoch, src.produced, s.p.maxPayload)
		if !src.w.HasCredit(len(pl)) {
			break
		}
		if _, err := src.w.Push(s.now, pl); err != nil {
			s.fail("Push after HasCredit: %v", err)
		}
		src.produced++
		if s.p.rateLimit > 0 {
			src.nextProd = s.now + s.p.rateLimit
		}
		if m, b := src.w.Retained(); m > s.wcfg.MaxMessages || b > s.wcfg.MaxBytes {
			s.fail("window holds %d msgs %d bytes, limits %d/%d", m, b, s.wcfg.MaxMessages, s.wcfg.MaxBytes)
		}
	}
	s.tick(src)
	if src.t.CanSend() {
		for src.w.Unsent() > 0 {
			k := 1 + s.rng.IntN(8)
			seq := src.w.NextToSend()
			for ; k > 0 && seq < src.w.NextSeq(); k, seq = k-1, seq+1 {
				ts, pl := src.w.Message(seq)
				if pl == nil {
					s.fail("Message(%d) not retained; window %d..%d", seq, src.w.Acked(), src.w.NextSeq())
				}
				if in := seq - src.w.Acked(); in >= uint64(s.wcfg.MaxMessages) {
					s.fail("sending seq %d with %d in flight beyond acked %d", seq, in, src.w.Acked())
				}
				_ = ts
				s.toTarget(&pkt{kind: pktData, epoch: src.epoch, seq: seq, payload: s.copyPayload(pl)})
			}
			if req, ok := src.t.OnSent(s.now, seq); ok {
				s.sendRequest(req)
			}
		}
		// Half the seeds request acks when the sender drains, as the
		// transport does; the other half rely on the quiet timer alone.
		if s.seed%2 == 0 {
			if req, ok := src.t.OnDrained(s.now); ok {
				s.sendRequest(req)
			}
		}
	}
	s.tick(src)

	// No stall: whenever something is unacknowledged or the channel is
	// (re)opening, a timer is set; an outstanding request is never older
	// than the longest timeout.
	unacked := src.w.SentHigh() > src.w.Acked() || !src.t.CanSend() || src.t.openOut
	d, ok := src.t.NextDeadline()
	if unacked && !ok {
		s.fail("source %d stalls: unacked %d..%d, CanSend %v, no deadline", i, src.w.Acked(), src.w.SentHigh(), src.t.CanSend())
	}
	if src.t.reqOut && s.now-src.t.reqAt > int64(s.cfg.MaxAckTimeout) {
		s.fail("request %d outstanding for %v without a repeat", src.t.reqSeq, time.Duration(s.now-src.t.reqAt))
	}
	if ok {
		s.wake(i, d)
	}
	if src.produced < s.p.messages && src.nextProd > s.now { // else waiting for credit: an ack pumps
		s.wake(i, src.nextProd)
	}
}

// copyPayload copies what goes on the wire, as a transport would, from a
// slab to keep the simulation fast.
func (s *sim) copyPayload(p []byte) []byte {
	if len(s.slab) < len(p) {
		s.slab = make([]byte, 64<<10)
	}
	c := s.slab[:len(p):len(p)]
	s.slab = s.slab[len(p):]
	copy(c, p)
	return c
}

func (s *sim) tick(src *simSource) {
	for range 10 {
		req, ok := src.t.Tick(s.now)
		if !ok {
			return
		}
		s.sendRequest(req)
	}
	s.fail("Tick keeps returning requests at one instant")
}

func (s *sim) answer() {
	for {
		a, ok := s.r.Answer()
		if !ok {
			return
		}
		if a.Next > s.r.Next() || a.Epoch != s.r.Epoch() {
			s.fail("Answer %+v disagrees with the receiver (next %d epoch %d)", a, s.r.Next(), s.r.Epoch())
		}
		// Acks go back to the source task: both incarnations hear them, and
		// each must ignore the other's.
		for i, src := range s.src {
			if src != nil && src.started {
				s.transmit(&pkt{kind: pktAck, ack: a}, evToSource, i)
			}
		}
	}
}

func (s *sim) atTarget(p *pkt) {
	if s.trace != nil && p.kind != pktData {
		s.trace("target got %d epoch %d seq %d (next %d consumed %d)", p.kind, p.epoch, p.seq, s.r.next, s.r.consumed)
	}
	switch p.kind {
	case pktOpen:
		if s.r.OnOpen(p.epoch, p.seq) == Accept {
			s.maxEpoch = max(s.maxEpoch, p.epoch)
		}
	case pktReq:
		s.r.OnAckRequest(p.epoch, p.seq)
	case pktData:
		v := s.r.OnData(p.epoch, p.seq)
		if v != Accept {
			break
		}
		if p.epoch != s.maxEpoch {
			s.fail("accepted data of epoch %d after epoch %d opened", p.epoch, s.maxEpoch)
		}
		s.inbox = append(s.inbox, queued{p.epoch, p.seq, p.payload})
		// Flow control: what the target holds unconsumed of the current
		// epoch never exceeds the window.
		var msgs, bytes int
		for _, q := range s.inbox {
			if q.epoch == p.epoch {
				msgs++
				bytes += len(q.payload)
			}
		}
		if msgs > s.wcfg.MaxMessages || bytes > s.wcfg.MaxBytes {
			s.fail("target holds %d msgs %d bytes unconsumed, window %d/%d", msgs, bytes, s.wcfg.MaxMessages, s.wcfg.MaxBytes)
		}
		s.startConsumer()
	}
	s.answer()
}

func (s *sim) startConsumer() {
	if s.consuming || len(s.inbox) == 0 {
		return
	}
	s.consuming = true
	d := int64(s.rng.IntN(20)) * int64(time.Microsecond)
	if s.rng.IntN(100) == 0 {
		d = int64(1+s.rng.IntN(10)) * int64(time.Millisecond) // the task pauses
	}
	s.schedule(s.now+d, evConsume, 0, nil)
}

func (s *sim) consume() {
	s.consuming = false
	m := s.inbox[0]
	s.inbox = s.inbox[1:]
	// Exactly once, in order, from the incarnation's first seq, intact.
	var first uint64
	found := false
	for _, src := range s.src {
		if src != nil && src.epoch == m.epoch {
			first, found = src.first, true
		}
	}
	if !found {
		s.fail("delivered a message of unknown epoch %d", m.epoch)
	}
	i := s.delivered[m.epoch]
	if m.seq != first+uint64(i) {
		s.fail("epoch %d: delivered seq %d, want %d (message %d)", m.epoch, m.seq, first+uint64(i), i)
	}
	if want := payloadFor(m.epoch, i, s.p.maxPayload); string(m.payload) != string(want) {
		s.fail("epoch %d seq %d: payload differs", m.epoch, m.seq)
	}
	s.delivered[m.epoch] = i + 1
	if m.epoch == s.r.Epoch() {
		s.r.Consumed(m.seq + 1)
	}
	s.answer()
	s.startConsumer()
}

// final is the incarnation whose stream must be delivered completely.
func (s *sim) final() *simSource {
	if s.src[1] != nil {
		return s.src[1]
	}
	return s.src[0]
}

func newSim(tb testing.TB, seed int) *sim {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x51))
	p := newProfile(rng, seed)
	s := &sim{
		tb: tb, seed: seed, p: p, rng: rng,
		cfg: Config{
			MinAckTimeout:     500 * time.Microsecond,
			MaxAckTimeout:     50 * time.Millisecond,
			InitialAckTimeout: 5 * time.Millisecond,
		},
		wcfg:      window.DefaultConfig(),
		r:         NewReceiver(),
		delivered: map[uint64]int{},
	}
	s.wcfg.MaxMessages, s.wcfg.MaxBytes = p.maxMsgs, p.maxBytes+p.maxPayload+16
	s.wcfg.QuietAfter = time.Duration(50+rng.IntN(500)) * time.Microsecond
	epoch := 1 + rng.Uint64N(1000)
	first := rng.Uint64() >> rng.IntN(64)
	s.src[0] = s.newSource(epoch, first, !p.clean && rng.IntN(4) == 0)
	s.src[0].started = true
	s.wake(0, 0)
	if p.zombie {
		at := int64(rng.IntN(20_000)) * int64(time.Microsecond)
		s.src[1] = s.newSource(epoch+1+rng.Uint64N(3), rng.Uint64()>>rng.IntN(64), false)
		s.schedule(at, evStartB, 1, nil)
	}
	for range p.resets {
		s.schedule(int64(rng.IntN(30_000))*int64(time.Microsecond), evReset, 0, nil)
	}
	return s
}

// newSource makes one incarnation. reopened makes its tracker start as a
// re-opened channel (waiting for the Open ack), else a brand-new one.
func (s *sim) newSource(epoch, first uint64, reopened bool) *simSource {
	w := window.NewSender(s.wcfg, first)
	return &simSource{w: w, t: NewTracker(s.cfg, w, epoch, !reopened), epoch: epoch, first: first}
}

const simTimeLimit = int64(20 * time.Second) // virtual

func (s *sim) run() {
	for !s.done {
		if len(s.q) == 0 {
			f := s.final()
			s.fail("nothing left to do but not done: acked %d of %d..%d, delivered %d", f.w.Acked(), f.first, f.first+uint64(s.p.messages), s.delivered[f.epoch])
		}
		e := heap.Pop(&s.q).(event)
		if e.at == s.now {
			s.sameInstant++
			if s.sameInstant > 100_000 {
				s.fail("livelock: 100000 events at one instant")
			}
		} else {
			s.sameInstant = 0
		}
		s.events++
		if s.events > 5_000_000 {
			s.fail("runaway: 5M events")
		}
		s.now = e.at
		if s.now > simTimeLimit {
			f := s.final()
			s.fail("not done within %v: acked %d of %d..%d, stats %+v / %+v", time.Duration(simTimeLimit), f.w.Acked(), f.first, f.first+uint64(s.p.messages), f.t.Stats(), s.r.Stats())
		}
		switch e.kind {
		case evToTarget:
			if e.p.conn == s.conn {
				s.atTarget(e.p)
			}
		case evToSource:
			if e.p.conn != s.conn {
				break
			}
			src := s.src[e.who]
			before := src.w.Acked()
			out := src.t.OnAck(s.now, e.p.ack)
			if s.trace != nil {
				s.trace("src%d ack %+v -> %+v (acked %d->%d, out %v %d)", e.who, e.p.ack, out, before, src.w.Acked(), src.t.reqOut, src.t.reqSeq)
			}
			if e.p.ack.Epoch != src.epoch && out.Verdict != Stale {
				s.fail("source %d (epoch %d) applied an ack of epoch %d: %+v", e.who, src.epoch, e.p.ack.Epoch, out)
			}
			if out.Verdict == Invalid {
				s.fail("an honest target's ack %+v was judged invalid", e.p.ack)
			}
			if got := int(src.w.Acked() - before); got != out.Freed {
				s.fail("OnAck says %d freed, window moved %d", out.Freed, got)
			}
			s.pump(e.who)
		case evWake:
			src := s.src[e.who]
			if src.wakeSet && src.wakeAt == e.at {
				src.wakeSet = false
			}
			s.pump(e.who)
		case evConsume:
			s.consume()
		case evReset:
			s.conn++
			s.downTill = s.now + int64(100+s.rng.IntN(5000))*int64(time.Microsecond)
			for i, src := range s.src {
				if src != nil && src.started {
					src.t.Reopen(s.now)
					s.wake(i, s.downTill)
				}
			}
		case evStartB:
			s.src[1].started = true
			s.pump(1)
		}
		f := s.final()
		s.done = f.started && f.w.Acked() == f.first+uint64(s.p.messages) && s.delivered[f.epoch] == s.p.messages
	}
	if z := s.src[0]; s.src[1] != nil && z.w.Acked() > z.first+uint64(s.delivered[z.epoch]) {
		s.fail("the zombie's window freed %d messages but only %d were delivered", z.w.Acked()-z.first, s.delivered[z.epoch])
	}
}

type simTotals struct {
	seeds, clean, zombies, resets                 int
	maxTime                                       int64
	rewinds, resent, repeats, openRepeats, reopen uint64
	staleAtTarget, gaps, dups, unopened           uint64
	staleAcks, mismatches                         uint64
}

func TestSimulation(t *testing.T) {
	seeds := 1000
	if testing.Short() {
		seeds = 200
	}
	if raceEnabled {
		seeds /= 10
	}
	if *simSeeds > 0 {
		seeds = *simSeeds
	}
	var tot simTotals
	for seed := range seeds {
		s := newSim(t, seed)
		s.run()
		tot.seeds++
		tot.maxTime = max(tot.maxTime, s.now)
		if s.p.clean {
			tot.clean++
		}
		if s.p.zombie {
			tot.zombies++
		}
		tot.resets += s.p.resets
		rs := s.r.Stats()
		tot.staleAtTarget += rs.Stale
		tot.gaps += rs.Gaps
		tot.dups += rs.Duplicates
		tot.unopened += rs.Unopened
		for _, src := range s.src {
			if src == nil || !src.started {
				continue
			}
			ts := src.t.Stats()
			tot.rewinds += ts.Rewinds
			tot.resent += ts.Resent
			tot.repeats += ts.Repeats
			tot.openRepeats += ts.OpenRepeats
			tot.reopen += ts.Reopens
			tot.staleAcks += ts.StaleAcks
			tot.mismatches += ts.CountMismatches
			if s.p.jitter == 0 && ts.CountExcess != 0 {
				t.Fatalf("seed %d: %d acks counted more than their interval: %+v", seed, ts.CountExcess, ts)
			}
			if s.p.clean && (ts.CountMismatches != 0 || ts.Rewinds != 0) {
				t.Fatalf("seed %d: a lossless in-order link saw %d count mismatches and %d rewinds", seed, ts.CountMismatches, ts.Rewinds)
			}
		}
	}
	t.Logf("%d seeds (%d clean, %d with a zombie, %d connection resets), longest run %v virtual",
		tot.seeds, tot.clean, tot.zombies, tot.resets, time.Duration(tot.maxTime))
	t.Logf("source: %d rewinds re-sending %d messages, %d request repeats, %d OPEN repeats, %d reopens, %d stale acks, %d count mismatches",
		tot.rewinds, tot.resent, tot.repeats, tot.openRepeats, tot.reopen, tot.staleAcks, tot.mismatches)
	t.Logf("target: %d gaps, %d duplicates, %d stale, %d unopened", tot.gaps, tot.dups, tot.staleAtTarget, tot.unopened)
	// The faults must actually have been exercised, or the run proves little.
	if seeds >= 100 {
		for name, n := range map[string]uint64{
			"rewinds": tot.rewinds, "request repeats": tot.repeats, "OPEN repeats": tot.openRepeats,
			"reopens": tot.reopen, "stale acks": tot.staleAcks, "gaps": tot.gaps,
			"duplicates": tot.dups, "stale data at the target": tot.staleAtTarget,
		} {
			if n == 0 {
				t.Errorf("no %s in %d seeds: the simulation does not exercise that path", name, seeds)
			}
		}
	}
}
