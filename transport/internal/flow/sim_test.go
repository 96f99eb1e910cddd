package flow

import (
	"bytes"
	"container/heap"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/sluicehq/sluice/lossdetect"
	"github.com/sluicehq/sluice/window"
	"github.com/sluicehq/sluice/wire"
)

var simSeeds = flag.Int("sim.seeds", 0, "seeds for TestSimulation (0: 400, 80 with -short or -race)")

// The simulation drives one Source as the transport does, through its
// events only, against a lossdetect.Receiver and a consumer with random
// delays, over a seeded link that drops, duplicates and reorders frames and
// sometimes breaks. Data goes out as the wire's run encoding, decoded again
// on the other side. Time is virtual and events are ordered by (time,
// insertion order), so a run is a pure function of its seed.

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
	seq     uint64
	payload []byte
	ack     lossdetect.Ack
	gen     int // the connection it was sent on
}

type evKind uint8

const (
	evToTarget evKind = iota
	evToSource
	evPump
	evConsume
	evReset
	evUp
)

type event struct {
	at    int64
	order uint64
	kind  evKind
	p     *pkt
}

type events []event

func (q events) Len() int { return len(q) }
func (q events) Less(i, j int) bool {
	return q[i].at < q[j].at || (q[i].at == q[j].at && q[i].order < q[j].order)
}
func (q events) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *events) Push(x any)   { *q = append(*q, x.(event)) }
func (q *events) Pop() any {
	old := *q
	e := old[len(old)-1]
	*q = old[:len(old)-1]
	return e
}

type profile struct {
	dropData, dropCtl, dup float64
	delay, jitter          int64
	resets                 int
	messages, maxPayload   int
	win                    window.Config
	pool                   bool
}

func newProfile(rng *rand.Rand, seed int) profile {
	p := profile{
		delay:      int64(10+rng.IntN(90)) * int64(time.Microsecond),
		messages:   100 + rng.IntN(400),
		maxPayload: 1 + rng.IntN(600),
		win: window.Config{MaxMessages: 2 + rng.IntN(100), MaxBytes: 1<<10 + rng.IntN(16<<10),
			AckRequestShare: 0.25, QuietAfter: 200 * time.Microsecond},
		pool: rng.IntN(2) == 0,
	}
	if seed%10 == 0 {
		return p // clean: in order, lossless
	}
	p.dropData, p.dropCtl, p.dup = rng.Float64()*0.1, rng.Float64()*0.1, rng.Float64()*0.04
	if rng.IntN(3) != 0 {
		p.jitter = int64(rng.IntN(150)) * int64(time.Microsecond)
	}
	p.resets = rng.IntN(3)
	return p
}

// tsFor is message i's timestamp: mostly rising by small steps, now and
// then jumping far back or far ahead, so that the deltas the window keeps
// encoded take from one to ten bytes and a run may start after any of them.
func tsFor(i int) int64 {
	switch i % 13 {
	case 5:
		return math.MinInt64 + int64(i)
	case 9:
		return math.MaxInt64 - int64(i)
	}
	return int64(i) * 1000
}

func payloadFor(i, maxPayload int) []byte {
	h := uint64(i)*0x9E3779B97F4A7C15 + 1
	b := make([]byte, 8+int(h%uint64(maxPayload)))
	binary.LittleEndian.PutUint64(b, uint64(i))
	for j := 8; j < len(b); j++ {
		b[j] = byte(h >> (j % 8 * 8))
	}
	return b
}

type sim struct {
	t     *testing.T
	seed  int
	base  uint64 // the first message's sequence number
	p     profile
	rng   *rand.Rand
	now   int64
	order uint64
	q     events

	src       *Source
	charged   int // window memory charged, as a transport's budget counts it
	produced  int
	gen       int  // connection generation
	up        bool // a connection carries the channel
	pumpAt    int64
	pumpSet   bool
	batch     []byte
	rd        wire.DataReader
	invalidAt int // 0: the receiver is honest; else it lies in its ack once this many messages were delivered

	r         *lossdetect.Receiver
	inbox     []uint64
	consuming bool
	delivered int
	verdict   bool // the Source said Invalid
	resent    int  // the Resent effects of Fill, summed
}

func (s *sim) fail(format string, args ...any) {
	s.t.Helper()
	s.t.Fatalf("seed %d at %v (%+v): %s", s.seed, time.Duration(s.now), s.p, fmt.Sprintf(format, args...))
}

func (s *sim) schedule(at int64, k evKind, p *pkt) {
	s.order++
	heap.Push(&s.q, event{at: at, order: s.order, kind: k, p: p})
}

func (s *sim) transmit(p *pkt, k evKind) {
	if !s.up {
		return
	}
	drop := s.p.dropCtl
	if p.kind == pktData {
		drop = s.p.dropData
	}
	p.gen = s.gen
	copies := 1
	if s.rng.Float64() < s.p.dup {
		copies = 2
	}
	for range copies {
		if s.rng.Float64() < drop {
			continue
		}
		d := s.p.delay
		if s.p.jitter > 0 {
			d += s.rng.Int64N(s.p.jitter)
		}
		s.schedule(s.now+d, k, p)
	}
}

func (s *sim) send(reqs []lossdetect.AckRequest) {
	for _, r := range reqs {
		k := pktReq
		if r.Open {
			k = pktOpen
		}
		s.transmit(&pkt{kind: k, epoch: r.Epoch, seq: r.Seq}, evToTarget)
	}
}

func (s *sim) checkCharge() {
	if fp := s.src.Footprint(); fp != s.charged {
		s.fail("window memory %d, charged %d", fp, s.charged)
	}
}

// pump is the transport's turn for the channel: push what has credit, fill
// batches of random room while the channel is ready, tick, set the timer.
func (s *sim) pump() {
	for s.produced < s.p.messages {
		pl := payloadFor(s.produced, s.p.maxPayload)
		ts := tsFor(s.produced)
		cost, ok := s.src.PushCost(ts, len(pl))
		if !ok {
			break
		}
		if _, err := s.src.Push(ts, pl); err != nil {
			s.fail("Push after PushCost said it fits: %v", err)
		}
		s.charged += cost
		s.produced++
		s.checkCharge()
	}
	if s.up {
		for range 8 {
			room := 1 + s.rng.IntN(4096)
			var n int
			var more bool
			var e Effects
			s.batch, n, _, more, e = s.src.Fill(s.now, s.batch[:0], 7, room, true)
			if n > 0 && len(s.batch) > room && n > 1 {
				s.fail("a run of %d messages took %d bytes of %d", n, len(s.batch), room)
			}
			s.sendRun(n)
			s.send(e.Requests)
			s.resent += e.Resent
			if !more {
				break
			}
		}
		s.send(s.src.Tick(s.now).Requests)
	}
	if s.verdict && (s.src.Ready() || len(s.src.Tick(s.now).Requests) > 0) {
		s.fail("the Source still sends after its Invalid verdict")
	}
	if at, ok := s.src.NextDeadline(); ok {
		s.wake(at)
	} else if s.up && !s.verdict && !s.src.Drained() {
		s.fail("messages unacknowledged and no deadline: the channel stalls")
	}
}

// sendRun decodes the run Fill encoded and puts each message on the link.
func (s *sim) sendRun(n int) {
	if n == 0 {
		if len(s.batch) != 0 {
			s.fail("Fill took no message but wrote %d bytes", len(s.batch))
		}
		return
	}
	s.rd.Reset(s.batch)
	h, err := s.rd.NextRun()
	if err != nil || h.Channel != 7 || h.Count != n {
		s.fail("run header %+v (%v), want channel 7 and %d messages", h, err, n)
	}
	for i := range n {
		m, err := s.rd.NextMessage()
		if err != nil {
			s.fail("message %d of the run: %v", i, err)
		}
		seq := h.FirstSeq + uint64(i)
		if m.Ts != tsFor(int(seq-s.base)) || !bytes.Equal(m.Payload, payloadFor(int(seq-s.base), s.p.maxPayload)) {
			s.fail("seq %d went out as ts %d and %d bytes that are not its payload", seq, m.Ts, len(m.Payload))
		}
		s.transmit(&pkt{kind: pktData, epoch: 1, seq: seq, payload: bytes.Clone(m.Payload)}, evToTarget) // the batch is reused
	}
	if _, err := s.rd.NextRun(); err != io.EOF {
		s.fail("more than one run in a Fill: %v", err)
	}
}

func (s *sim) wake(at int64) {
	at = max(at, s.now)
	if !s.pumpSet || at < s.pumpAt {
		s.pumpAt, s.pumpSet = at, true
		s.schedule(at, evPump, nil)
	}
}

// answer sends the receiver's acks, the liar's contradicting what was sent.
func (s *sim) answer() {
	for {
		a, ok := s.r.Answer()
		if !ok {
			return
		}
		if s.invalidAt > 0 && s.delivered >= s.invalidAt && !s.verdict {
			a.Next += 1000 // more than was ever sent
		}
		s.transmit(&pkt{kind: pktAck, ack: a}, evToSource)
	}
}

func (s *sim) atTarget(p *pkt) {
	switch p.kind {
	case pktOpen:
		s.r.OnOpen(p.epoch, p.seq)
	case pktReq:
		s.r.OnAckRequest(p.epoch, p.seq)
	case pktData:
		if s.r.OnData(p.epoch, p.seq) == lossdetect.Accept {
			s.inbox = append(s.inbox, p.seq)
			if !bytes.Equal(p.payload, payloadFor(int(p.seq-s.base), s.p.maxPayload)) {
				s.fail("seq %d arrived with another payload", p.seq)
			}
			if !s.consuming {
				s.consuming = true
				s.schedule(s.now+s.rng.Int64N(int64(50*time.Microsecond)), evConsume, nil)
			}
		}
	}
	s.answer()
}

func (s *sim) consume() {
	seq := s.inbox[0]
	s.inbox = s.inbox[1:]
	if seq != s.base+uint64(s.delivered) {
		s.fail("delivered seq %d, want %d", seq, s.base+uint64(s.delivered))
	}
	s.delivered++
	s.r.Consumed(seq + 1)
	s.answer()
	if s.consuming = len(s.inbox) > 0; s.consuming {
		s.schedule(s.now+s.rng.Int64N(int64(50*time.Microsecond)), evConsume, nil)
	}
}

func (s *sim) atSource(p *pkt) {
	e := s.src.OnAck(s.now, p.ack)
	if e.Invalid {
		if s.invalidAt == 0 {
			s.fail("Invalid verdict from an honest receiver on %+v", p.ack)
		}
		s.verdict = true
	}
	if s.verdict && (e.Freed != 0 || e.Released != 0) {
		s.fail("effects %+v after the Invalid verdict", e)
	}
	s.charged -= e.Released
	s.checkCharge()
	s.pump()
}

func run(t *testing.T, seed int, invalidAt int) *sim {
	rng := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
	p := newProfile(rng, seed)
	var pool *window.Pool
	if p.pool {
		pool = window.NewPool(64 << 10)
	}
	s := &sim{t: t, seed: seed, p: p, rng: rng, r: lossdetect.NewReceiver(), invalidAt: invalidAt}
	if seed%2 == 1 { // a channel opened where a closed one left off
		s.base = rng.Uint64N(1 << 40)
	}
	s.src = New(p.win, lossdetect.DefaultConfig(), 1, s.base, pool)
	s.up = true
	s.src.Attach(0)
	for i := range p.resets {
		s.schedule(int64(1+i)*int64(time.Millisecond)+rng.Int64N(int64(time.Millisecond)), evReset, nil)
	}
	s.schedule(0, evPump, nil)
	for steps := 0; s.q.Len() > 0; steps++ {
		if steps > 5_000_000 {
			s.fail("no end after %d events: delivered %d of %d", steps, s.delivered, p.messages)
		}
		e := heap.Pop(&s.q).(event)
		s.now = e.at
		if e.p != nil && e.p.gen != s.gen {
			continue // sent on a connection that broke
		}
		switch e.kind {
		case evToTarget:
			s.atTarget(e.p)
		case evToSource:
			s.atSource(e.p)
		case evPump:
			if e.at == s.pumpAt {
				s.pumpSet = false
			}
			s.pump()
		case evConsume:
			s.consume()
		case evReset:
			s.gen++
			s.up = false
			s.src.Detach()
			s.schedule(s.now+int64(200*time.Microsecond), evUp, nil)
		case evUp:
			s.up = true
			s.src.Attach(s.now)
			s.pump()
		}
		if s.produced == p.messages && s.src.Drained() && !s.consuming {
			break
		}
		if s.verdict && !s.consuming {
			break
		}
	}
	return s
}

// Every message pushed is delivered once, in order, and acknowledged, under
// loss, duplication, reordering and broken connections; the window memory
// the Source reports charged and released always equals its footprint.
func TestSimulation(t *testing.T) {
	n := *simSeeds
	if n == 0 {
		n = 400
		if testing.Short() || raceEnabled {
			n = 80
		}
	}
	for seed := range n {
		s := run(t, seed, 0)
		if s.delivered != s.p.messages || !s.src.Drained() {
			s.fail("delivered %d of %d, drained %v", s.delivered, s.p.messages, s.src.Drained())
		}
		st := s.src.Stats()
		if st.Sent != uint64(s.p.messages) || st.Unacked != 0 || st.Unsent != 0 {
			s.fail("stats %+v after every message was acknowledged", st)
		}
		if s.p.dropData > 0 && st.Tracker.Rewinds > 0 && st.Resent == 0 {
			s.fail("%d rewinds and nothing counted as re-sent", st.Tracker.Rewinds)
		}
		if st.Resent != uint64(s.resent) {
			s.fail("%d messages counted as re-sent, the Fill effects said %d", st.Resent, s.resent)
		}
		s.charged -= s.src.Trim()
		s.checkCharge()
	}
}

// A receiver that acknowledges messages never sent gets the Invalid
// verdict: the Source stops sending for good (no data, no requests, no
// deadline) and its effects carry nothing more.
func TestSimulationInvalidAck(t *testing.T) {
	verdicts := 0
	runs := 100
	if raceEnabled {
		runs = 40
	}
	for seed := range runs {
		s := run(t, seed, 1+seed%40)
		if !s.verdict {
			if s.delivered > s.invalidAt {
				s.fail("the receiver lied after %d messages and no Invalid verdict came", s.invalidAt)
			}
			continue // the lie was lost on the link or came too late: nothing to check
		}
		verdicts++
		if _, ok := s.src.NextDeadline(); ok {
			s.fail("a deadline after the Invalid verdict")
		}
		out, n, _, _, e := s.src.Fill(s.now, nil, 7, 1<<20, true)
		if n != 0 || len(out) != 0 || len(e.Requests) != 0 {
			s.fail("Fill after the Invalid verdict took %d messages and %d requests", n, len(e.Requests))
		}
	}
	if verdicts < runs/2 {
		t.Errorf("only %d of %d runs reached the Invalid verdict; the test proves little", verdicts, runs)
	}
}
