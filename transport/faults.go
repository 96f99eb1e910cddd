package transport

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/wire"
)

// Faults describes the faults a node injects into its connections, like
// Aeron's loss generators and Linux's netem: seeded, so a failing run can be
// repeated (each connection draws from a generator seeded with Seed and its
// own number, so a run with the same traffic injects the same frame faults;
// which connection a Reset breaks follows the clock, not the seed). The
// zero value injects nothing.
//
// Only DATA frames and the frames of flow control and liveness (ACKREQUEST,
// ACK, PING, PONG) are dropped or duplicated (Drop, CtrlDrop, Dup, GE).
// OPEN, CLOSE and GOAWAY carry connection state that TCP never loses on its
// own; their loss is modelled by Reset, which breaks the whole connection.
// Delay, Bandwidth and Partition hold frames of every type and write them
// later, in the order they were written: TCP delays a connection's bytes
// but never reorders them.
//
// Reset and Partition are timed on the node's fault clock, which starts
// with the node, or, for a node made with [WithDeferredFaultClock], when
// [Node.StartFaultClock] is called.
type Faults struct {
	Drop     float64       // probability that a DATA frame is dropped
	CtrlDrop float64       // probability that an ACKREQUEST, ACK, PING or PONG is dropped
	Dup      float64       // probability that a DATA or control frame is sent twice
	Reset    time.Duration // break one dialed connection abruptly every Reset (the first Reset after the fault clock started), at most once per 20 ms (0: never)

	// Delay holds each frame Delay, plus or minus up to Jitter (uniform),
	// before it goes out; a frame never overtakes the one before it.
	Delay, Jitter time.Duration
	// Bandwidth caps the bytes per second a connection writes (0: no cap):
	// a token bucket that holds 10 ms of the rate (BurstTime).
	Bandwidth int64
	// GE drops the same frames as Drop and CtrlDrop in bursts.
	GE GilbertElliott
	// Partition cuts the node off from its peers for PartitionFor,
	// beginning when it next writes a frame or looks at what it received
	// once PartitionAt has passed on the fault clock: nothing it writes
	// goes out and nothing it receives is read until the partition heals.
	// On a node with traffic that is PartitionAt; one that did no I/O from
	// then on (idle, or not scheduled on a loaded machine) would have had
	// nothing cut off, and the partition waits for it. The
	// connections survive it, as TCP connections outlast a short partition
	// by retransmitting: what was held goes out at the heal, in order.
	// What arrives meanwhile waits unread in the link's inbound buffer,
	// bounded by what the peer may send unacknowledged (its windows).
	PartitionAt, PartitionFor time.Duration

	Seed uint64 // seed of the fault generator
}

// BurstTime is how much of [Faults.Bandwidth] the token bucket lets through
// at once.
const BurstTime = 10 * time.Millisecond

// GilbertElliott is the two-state burst loss model: a connection's lossy
// frames (those Drop and CtrlDrop apply to) see a Markov chain that moves
// from the good state to the bad one with probability P and back with
// probability R at each frame, and lose a frame with probability LossGood in
// the good state and LossBad in the bad one. Bursts of loss average 1/R
// frames; the chain spends P/(P+R) of the frames in the bad state. A model
// that neither leaves the good state (P = 0) nor loses in it (LossGood = 0)
// loses nothing, and ParseFaults reads it as the zero value.
type GilbertElliott struct {
	P, R              float64
	LossBad, LossGood float64
}

func (g GilbertElliott) enabled() bool { return g.P > 0 || g.LossGood > 0 }

// Enabled reports whether any fault is configured.
func (f Faults) Enabled() bool { return f.Reset > 0 || f.framed() }

// framed reports whether any fault acts on frames, which needs a fault link.
func (f Faults) framed() bool {
	return f.Drop > 0 || f.CtrlDrop > 0 || f.Dup > 0 || f.Delay > 0 || f.Jitter > 0 ||
		f.Bandwidth > 0 || f.GE.enabled() || f.PartitionFor > 0
}

func (f Faults) validate() error {
	for _, p := range []struct {
		name string
		v    float64
	}{{"drop", f.Drop}, {"ctrldrop", f.CtrlDrop}, {"dup", f.Dup}} {
		if !(p.v >= 0 && p.v < 1) { // NaN too
			return fmt.Errorf("transport: fault %s=%v must be a probability in [0, 1)", p.name, p.v)
		}
	}
	for _, p := range []struct {
		name string
		v    float64
	}{{"p", f.GE.P}, {"r", f.GE.R}, {"loss in the bad state", f.GE.LossBad}, {"loss in the good state", f.GE.LossGood}} {
		if !(p.v >= 0 && p.v <= 1) {
			return fmt.Errorf("transport: fault ge: %s=%v must be a probability in [0, 1]", p.name, p.v)
		}
	}
	if f.GE.P > 0 && f.GE.R == 0 {
		return errors.New("transport: fault ge: r=0 would never leave the bad state")
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"reset", f.Reset}, {"delay", f.Delay}, {"jitter", f.Jitter}, {"partition start", f.PartitionAt}, {"partition", f.PartitionFor}} {
		if d.v < 0 {
			return fmt.Errorf("transport: fault %s=%v must not be negative", d.name, d.v)
		}
	}
	if f.Bandwidth < 0 {
		return fmt.Errorf("transport: fault bw=%d must not be negative", f.Bandwidth)
	}
	return nil
}

// ParseFaults reads faults written as
// "drop=0.05,ctrldrop=0.05,dup=0.01,reset=2s,delay=2ms,jitter=1ms,bw=10MB,ge=0.01:0.3:0.5,partition=3s@5s":
//
//   - drop, ctrldrop, dup: probabilities;
//   - reset, delay, jitter: durations;
//   - bw: bytes per second, with an optional unit B, KB, MB, GB (powers of
//     1000) or KiB, MiB, GiB (of 1024) and an optional "/s";
//   - ge=P:R[:LOSSBAD[:LOSSGOOD]]: a Gilbert-Elliott model; LOSSBAD
//     defaults to 1 and LOSSGOOD to 0 (Gilbert's model);
//   - partition=T@S: a partition of T beginning with the node's first
//     write or read S or more after its fault clock started (the node's
//     start, unless [WithDeferredFaultClock]).
//
// Keys it does not know are returned in rest, in order, for layers above the
// transport (the engine's crash= and kill=). [Faults.String] writes faults
// back in this syntax.
func ParseFaults(s string, seed uint64) (f Faults, rest []string, err error) {
	f.Seed = seed
	if strings.TrimSpace(s) == "" {
		return f, nil, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return f, nil, fmt.Errorf("transport: fault %q is not key=value", kv)
		}
		var err error
		switch k {
		case "drop":
			f.Drop, err = strconv.ParseFloat(v, 64)
		case "ctrldrop":
			f.CtrlDrop, err = strconv.ParseFloat(v, 64)
		case "dup":
			f.Dup, err = strconv.ParseFloat(v, 64)
		case "reset":
			f.Reset, err = time.ParseDuration(v)
		case "delay":
			f.Delay, err = time.ParseDuration(v)
		case "jitter":
			f.Jitter, err = time.ParseDuration(v)
		case "bw":
			f.Bandwidth, err = parseRate(v)
		case "ge":
			f.GE, err = parseGE(v)
		case "partition":
			f.PartitionFor, f.PartitionAt, err = parsePartition(v)
		default:
			rest = append(rest, kv)
		}
		if err != nil {
			return f, nil, fmt.Errorf("transport: fault %s: %w", k, err)
		}
	}
	return f, rest, f.validate()
}

// rateUnits are bw's units, longest first so that "MiB" is not read as "B".
var rateUnits = []struct {
	suffix string
	mult   float64
}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"KB", 1e3}, {"MB", 1e6}, {"GB", 1e9}, {"B", 1}}

func parseRate(v string) (int64, error) {
	s := strings.TrimSuffix(v, "/s")
	mult := 1.0
	for _, u := range rateUnits {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			s, mult = num, u.mult
			break
		}
	}
	x, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a rate in bytes per second (like 10MB or 512KiB)", v)
	}
	r := x * mult
	if !(r >= 1 && r <= math.MaxInt64/2) {
		return 0, fmt.Errorf("%q: a rate must be at least 1 byte per second", v)
	}
	return int64(r), nil
}

func parseGE(v string) (GilbertElliott, error) {
	parts := strings.Split(v, ":")
	if len(parts) < 2 || len(parts) > 4 {
		return GilbertElliott{}, fmt.Errorf("%q is not P:R[:LOSSBAD[:LOSSGOOD]]", v)
	}
	x := []float64{0, 0, 1, 0}
	for i, p := range parts {
		var err error
		if x[i], err = strconv.ParseFloat(p, 64); err != nil {
			return GilbertElliott{}, fmt.Errorf("%q is not P:R[:LOSSBAD[:LOSSGOOD]]: %w", v, err)
		}
		if !(x[i] >= 0 && x[i] <= 1) {
			return GilbertElliott{}, fmt.Errorf("%q: %v is not a probability in [0, 1]", v, x[i])
		}
	}
	g := GilbertElliott{P: x[0], R: x[1], LossBad: x[2], LossGood: x[3]}
	if !g.enabled() {
		return GilbertElliott{}, nil
	}
	return g, nil
}

func parsePartition(v string) (length, at time.Duration, err error) {
	l, a, ok := strings.Cut(v, "@")
	if !ok {
		return 0, 0, fmt.Errorf("%q is not LENGTH@START (like 3s@5s)", v)
	}
	if length, err = time.ParseDuration(l); err != nil {
		return 0, 0, err
	}
	if at, err = time.ParseDuration(a); err != nil {
		return 0, 0, err
	}
	if length <= 0 {
		return 0, 0, fmt.Errorf("%q: the partition must last more than 0", v)
	}
	return length, at, nil
}

// String writes f in the syntax of [ParseFaults] (without the seed), the
// faults that are set only.
func (f Faults) String() string {
	var parts []string
	add := func(k, v string) { parts = append(parts, k+"="+v) }
	fl := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	if f.Drop > 0 {
		add("drop", fl(f.Drop))
	}
	if f.CtrlDrop > 0 {
		add("ctrldrop", fl(f.CtrlDrop))
	}
	if f.Dup > 0 {
		add("dup", fl(f.Dup))
	}
	if f.Reset > 0 {
		add("reset", f.Reset.String())
	}
	if f.Delay > 0 {
		add("delay", f.Delay.String())
	}
	if f.Jitter > 0 {
		add("jitter", f.Jitter.String())
	}
	if f.Bandwidth > 0 {
		add("bw", strconv.FormatInt(f.Bandwidth, 10))
	}
	if f.GE.enabled() {
		add("ge", fl(f.GE.P)+":"+fl(f.GE.R)+":"+fl(f.GE.LossBad)+":"+fl(f.GE.LossGood))
	}
	if f.PartitionFor > 0 {
		add("partition", f.PartitionFor.String()+"@"+f.PartitionAt.String())
	}
	return strings.Join(parts, ",")
}

// faultSchedule is when a node's timed faults happen, shared by its
// connections' models. from is when the fault clock started, in node time:
// the node's start (0, the zero value), or, for a node made with
// WithDeferredFaultClock, the call of Node.StartFaultClock
// (faultClockStopped until then). began is when the partition began, node
// time plus one (0: not yet): at the first write or read of any connection
// once PartitionAt had passed on the clock. Each is set at most once, so a
// model may keep what it read once it found it set.
type faultSchedule struct{ from, began atomic.Int64 }

const faultClockStopped = -1

// clockStarted returns when the fault clock started (node time), and false
// before it did.
func (s *faultSchedule) clockStarted() (from int64, ok bool) {
	from = s.from.Load()
	return from, from != faultClockStopped
}

// startClock starts a stopped clock at now, and reports whether it did.
func (s *faultSchedule) startClock(now int64) bool {
	return s.from.CompareAndSwap(faultClockStopped, now)
}

// partitionBegan returns when the partition began (node time), and false
// before it did.
func (s *faultSchedule) partitionBegan() (int64, bool) {
	b := s.began.Load()
	return b - 1, b != 0
}

// beginPartition begins the partition at now, unless a connection began
// it already, and returns when it began.
func (s *faultSchedule) beginPartition(now int64) int64 {
	s.began.CompareAndSwap(0, now+1)
	return s.began.Load() - 1
}

// partitionTime is how much of f's partition has passed at now (node
// time): 0 before it began.
func (s *faultSchedule) partitionTime(f Faults, now int64) time.Duration {
	began, ok := s.partitionBegan()
	if !ok || f.PartitionFor <= 0 {
		return 0
	}
	return time.Duration(min(max(now-began, 0), int64(f.PartitionFor)))
}

// FaultStats counts the faults a node injected.
type FaultStats struct {
	DataDropped uint64 `json:"drop"`
	CtrlDropped uint64 `json:"ctrldrop"`
	Duplicated  uint64 `json:"dup"`
	Resets      uint64 `json:"reset"`
	// GEDropped counts the frames the Gilbert-Elliott model dropped (DATA
	// and control alike).
	GEDropped uint64 `json:"ge_drop"`
	// Delayed counts the frames held for Delay and Jitter; Throttled the
	// bytes the bandwidth cap held back.
	Delayed   uint64 `json:"delayed"`
	Throttled uint64 `json:"throttled_bytes"`
	// PartitionHeld counts the frames written during the partition and
	// held until it healed; PartitionReads the times a connection's
	// inbound bytes were left unread because of it.
	PartitionHeld  uint64 `json:"partition_held"`
	PartitionReads uint64 `json:"partition_reads"`
	// PartitionTime is how much of the partition has passed: 0 before it
	// starts, [Faults.PartitionFor] once it healed.
	PartitionTime time.Duration `json:"partition_ns"`
	// HeldMax is the most bytes one connection's fault link held at once
	// (delayed, throttled or partitioned). Two bounds keep it: frames that
	// have not left (throttled, partitioned) count as the link's unwritten
	// bytes, so the connection writes no more batches while
	// [batch.Config.MaxInflight] batches' worth wait; frames on the wire
	// (delayed) are messages not yet acknowledged, which the channels'
	// windows and the peer budget bound.
	HeldMax uint64 `json:"held_max_bytes"`
}

// Add returns the sums of s's and o's counters, and the larger HeldMax and
// PartitionTime (both are per node, not summed).
func (s FaultStats) Add(o FaultStats) FaultStats {
	s.DataDropped += o.DataDropped
	s.CtrlDropped += o.CtrlDropped
	s.Duplicated += o.Duplicated
	s.Resets += o.Resets
	s.GEDropped += o.GEDropped
	s.Delayed += o.Delayed
	s.Throttled += o.Throttled
	s.PartitionHeld += o.PartitionHeld
	s.PartitionReads += o.PartitionReads
	s.PartitionTime = max(s.PartitionTime, o.PartitionTime)
	s.HeldMax = max(s.HeldMax, o.HeldMax)
	return s
}

type faultCounters struct {
	dataDropped, ctrlDropped, duplicated, resets atomic.Uint64
	geDropped, delayed, throttled                atomic.Uint64
	partitionHeld, partitionReads                atomic.Uint64
	heldMax                                      atomic.Uint64
}

func (c *faultCounters) snapshot() FaultStats {
	return FaultStats{
		DataDropped:    c.dataDropped.Load(),
		CtrlDropped:    c.ctrlDropped.Load(),
		Duplicated:     c.duplicated.Load(),
		Resets:         c.resets.Load(),
		GEDropped:      c.geDropped.Load(),
		Delayed:        c.delayed.Load(),
		Throttled:      c.throttled.Load(),
		PartitionHeld:  c.partitionHeld.Load(),
		PartitionReads: c.partitionReads.Load(),
		HeldMax:        c.heldMax.Load(),
	}
}

func (c *faultCounters) noteHeld(n int) {
	for {
		cur := c.heldMax.Load()
		if uint64(n) <= cur || c.heldMax.CompareAndSwap(cur, uint64(n)) {
			return
		}
	}
}

// A faultModel decides the fate of the frames one connection writes: how
// many copies of each go out (0 drops it, 2 duplicates it) and when. It is
// used only on the connection's loop, draws from a generator seeded per
// connection, and counts what it injects.
type faultModel struct {
	f   Faults
	rng *rand.Rand
	n   *faultCounters

	geBad    bool  // the Gilbert-Elliott chain is in its bad state
	tat      int64 // the bandwidth cap's theoretical arrival time (GCRA)
	lastSend int64 // when the previous frame left: none overtakes it
	last     int64 // when the previous frame arrives: none overtakes it
	// sched is the node's schedule of timed faults; partStart and partEnd
	// bound the partition in node time once it began (0, 0: not yet, or
	// none configured).
	sched              *faultSchedule
	partStart, partEnd int64
}

// newFaultModel returns the model of f for the connection numbered stream,
// its partition on the node's schedule sched (nil: one of its own, whose
// clock started with the node), or nil when f does nothing to frames.
func newFaultModel(f Faults, stream uint64, n *faultCounters, sched *faultSchedule) *faultModel {
	if !f.framed() {
		return nil
	}
	if sched == nil {
		sched = new(faultSchedule)
	}
	return &faultModel{f: f, rng: rand.New(rand.NewPCG(f.Seed, stream)), n: n, sched: sched}
}

// placePartition places the partition in node time once it has begun, on
// this connection or another of the node's. A frame written or a read at
// now begins it once PartitionAt has passed on the fault clock, so that it
// holds that frame or read: timed by the clock alone, a partition passed
// without meeting either when the node was not scheduled while it lasted
// (a loaded machine's transport run).
func (m *faultModel) placePartition(now int64) {
	if m.partEnd != 0 || m.f.PartitionFor <= 0 {
		return
	}
	began, ok := m.sched.partitionBegan()
	if !ok {
		from, started := m.sched.clockStarted()
		if !started || now < from+int64(m.f.PartitionAt) {
			return
		}
		began = m.sched.beginPartition(now)
	}
	m.partStart, m.partEnd = began, began+int64(m.f.PartitionFor)
}

// fate returns how many copies of a frame of type t and size bytes,
// written at now, go out; when they leave this node (sendAt: the bandwidth
// cap and the partition hold them back); and when they arrive, to be
// written to the socket (at, after the delay). Times are node times; at <=
// now means at once. Frames leave in the order written and arrive in that
// order, as TCP's bytes do.
func (m *faultModel) fate(now int64, t wire.FrameType, size int) (copies int, sendAt, at int64) {
	copies = 1
	switch t {
	case wire.FrameData, wire.FrameAckRequest, wire.FrameAck, wire.FramePing, wire.FramePong:
		if m.lost(t) {
			return 0, 0, 0
		}
		if m.f.Dup > 0 && m.rng.Float64() < m.f.Dup {
			m.n.duplicated.Add(1)
			copies = 2
		}
	}
	m.placePartition(now)
	partitioned := false
	sendAt = max(now, m.lastSend)
	if (now >= m.partStart && now < m.partEnd) || (sendAt >= m.partStart && sendAt < m.partEnd) {
		sendAt, partitioned = max(sendAt, m.partEnd), true
	}
	if r := m.f.Bandwidth; r > 0 {
		// GCRA, the token bucket as a schedule: a frame may leave once the
		// bucket's theoretical arrival time is at most BurstTime ahead.
		bytes := int64(size * copies)
		if free := m.tat - int64(BurstTime); sendAt < free {
			sendAt = free
			m.n.throttled.Add(uint64(bytes))
		}
		m.tat = max(m.tat, sendAt) + int64(float64(bytes)*1e9/float64(r))
	}
	m.lastSend = sendAt
	at = sendAt
	if m.f.Delay > 0 || m.f.Jitter > 0 {
		d := int64(m.f.Delay)
		if j := int64(m.f.Jitter); j > 0 {
			d += m.rng.Int64N(2*j+1) - j
		}
		if d > 0 {
			at += d
			m.n.delayed.Add(1)
		}
	}
	if at >= m.partStart && at < m.partEnd {
		// On the wire when the partition began: it arrives at the heal,
		// as TCP's retransmission would bring it.
		at, partitioned = m.partEnd, true
	}
	if partitioned {
		m.n.partitionHeld.Add(1)
	}
	at = max(at, m.last)
	m.last = at
	return copies, sendAt, at
}

// lost decides whether a lossy frame of type t is dropped: by Drop or
// CtrlDrop, then by the Gilbert-Elliott chain, which moves after each frame.
func (m *faultModel) lost(t wire.FrameType) bool {
	p, counter := m.f.CtrlDrop, &m.n.ctrlDropped
	if t == wire.FrameData {
		p, counter = m.f.Drop, &m.n.dataDropped
	}
	if p > 0 && m.rng.Float64() < p {
		counter.Add(1)
		return true
	}
	g := &m.f.GE
	if !g.enabled() {
		return false
	}
	loss := g.LossGood
	if m.geBad {
		loss = g.LossBad
	}
	lost := loss > 0 && m.rng.Float64() < loss
	if m.geBad {
		m.geBad = m.rng.Float64() >= g.R
	} else {
		m.geBad = m.rng.Float64() < g.P
	}
	if lost {
		m.n.geDropped.Add(1)
	}
	return lost
}

// partitionEnd returns when the partition in effect at now heals, or 0.
func (m *faultModel) partitionEnd(now int64) int64 {
	m.placePartition(now)
	if now >= m.partStart && now < m.partEnd {
		return m.partEnd
	}
	return 0
}

// faultLink is a link that passes the frames written to it through a
// faultModel. Until the handshake is done (arm) its writes pass untouched:
// the preface is not framed, and its loss is modelled by Reset. The conn
// writes only whole frames through its link, so each write is cut into
// frames at their headers; a direct write, which bypasses the link, is never
// made on a connection with faults (see conn.setLink).
//
// Frames the model holds for later wait in held, in order, and a timer
// makes the loop write them when they are due (Execute: the timer runs on
// no loop). Those that have not left this node (the bandwidth cap or a
// partition holds them) count in OutboundBuffered, as a socket buffer's
// bytes would, so the conn's batch policy writes no more while
// MaxInflight batches' worth wait, and the senders are back-pressured
// through their windows instead of queueing here. Those delayed after
// leaving are on the wire, as on a long link: the windows bound them (what
// is on the wire is unacknowledged). During a partition Peek shows none of
// the inbound bytes and the loop reads them when it heals (onHeal).
type faultLink struct {
	link
	model *faultModel
	now   func() int64
	// onHeal makes the conn read what the partition left unread;
	// onRelease lets it write again after held frames went out. Both run
	// on the loop.
	onHeal, onRelease loopFunc

	// loop
	armed   bool
	iov     [][]byte // the frames that go out, one slice each
	held    heldFrames
	timerAt int64 // when the release timer fires (0: not armed)
	healing bool  // a read is scheduled for the partition's end

	timer       *time.Timer // set once; fires release on the loop
	releaseTask loopFunc
}

func newFaultLink(lk link, m *faultModel, now func() int64, onHeal, onRelease loopFunc) *faultLink {
	l := &faultLink{link: lk, model: m, now: now, onHeal: onHeal, onRelease: onRelease}
	l.releaseTask = l.release
	l.timer = time.AfterFunc(time.Hour, func() { _ = l.link.Execute(l.releaseTask) })
	l.timer.Stop()
	return l
}

// arm starts applying the model. Loop only.
func (l *faultLink) arm() { l.armed = true }

// stop ends the link's timer. Safe for concurrent use.
func (l *faultLink) stop() { l.timer.Stop() }

func (l *faultLink) Peek(n int) ([]byte, error) {
	if l.armed {
		now := l.now()
		if end := l.model.partitionEnd(now); end > 0 {
			if !l.healing {
				l.healing = true
				l.model.n.partitionReads.Add(1)
				time.AfterFunc(time.Duration(end-now), func() { _ = l.link.Execute(l.heal) })
			}
			return nil, nil
		}
	}
	return l.link.Peek(n)
}

func (l *faultLink) heal() {
	l.healing = false
	l.onHeal()
}

// OutboundBuffered counts the held frames that have not left this node
// (throttled or partitioned) as unwritten, as a socket buffer would hold
// them; delayed frames that left are on the wire.
func (l *faultLink) OutboundBuffered() int {
	return l.link.OutboundBuffered() + l.held.unsentBytes(l.now())
}

func (l *faultLink) Write(b []byte) (int, error) {
	if !l.armed {
		return l.link.Write(b)
	}
	return l.Writev([][]byte{b})
}

func (l *faultLink) Writev(bs [][]byte) (int, error) {
	if !l.armed {
		return l.link.Writev(bs)
	}
	now := l.now()
	if err := l.writeDue(now); err != nil {
		return 0, err
	}
	iov, total := l.iov[:0], 0
	for _, b := range bs {
		total += len(b)
		for len(b) > 0 {
			h, err := wire.DecodeHeader(b, math.MaxInt32)
			n := wire.HeaderLen + int(h.Length)
			if err != nil || n > len(b) {
				// Not a whole frame (the conn writes none such): as it is.
				if l.held.empty() {
					iov = append(iov, b)
				} else {
					l.held.push(l.model.lastSend, l.model.last, b)
				}
				break
			}
			copies, sendAt, at := l.model.fate(now, h.Type, n)
			for range copies {
				if at <= now && l.held.empty() {
					iov = append(iov, b[:n])
				} else {
					l.held.push(sendAt, at, b[:n])
				}
			}
			b = b[n:]
		}
	}
	l.iov = iov
	defer clear(iov)
	if len(iov) > 0 {
		if _, err := l.link.Writev(iov); err != nil {
			return 0, err
		}
	}
	if !l.held.empty() {
		l.model.n.noteHeld(l.held.bytes())
		l.armTimer(now)
	}
	return total, nil
}

// writeDue writes the held frames due at now. Loop only.
func (l *faultLink) writeDue(now int64) error {
	if b := l.held.popDue(now); len(b) > 0 {
		if _, err := l.link.Write(b); err != nil {
			return err
		}
	}
	return nil
}

// release runs on the loop when the timer fires: it writes what is due,
// waits again for the rest, and lets the conn write what it held back.
func (l *faultLink) release() {
	l.timerAt = 0
	now := l.now()
	if err := l.writeDue(now); err != nil {
		_ = l.link.Close()
		return
	}
	if !l.held.empty() {
		l.armTimer(now)
	}
	l.onRelease()
}

// armTimer makes the timer fire when the first held frame is due. Loop
// only.
func (l *faultLink) armTimer(now int64) {
	at := l.held.nextAt()
	if l.timerAt != 0 && l.timerAt <= at {
		return
	}
	l.timerAt = at
	l.timer.Reset(time.Duration(max(at-now, 0)))
}

// heldFrames is a FIFO of frames with the times each leaves this node and
// may be written, their bytes kept back to back in one buffer, so that the
// frames due form one slice. Both times grow along the queue.
type heldFrames struct {
	buf  []byte
	off  int // buf[off:] is held
	q    []heldFrame
	head int
	// sent indexes the first frame that has not left at the last look;
	// unsent is the bytes of the frames from it on.
	sent   int
	unsent int
}

type heldFrame struct {
	sendAt, at int64
	n          int
}

// heldKeepCap is the buffer capacity kept once it empties.
const heldKeepCap = 1 << 20

func (h *heldFrames) empty() bool   { return h.head == len(h.q) }
func (h *heldFrames) bytes() int    { return len(h.buf) - h.off }
func (h *heldFrames) nextAt() int64 { return h.q[h.head].at }

// unsentBytes returns the bytes of the frames that have not left at now.
func (h *heldFrames) unsentBytes(now int64) int {
	for h.sent < len(h.q) && h.q[h.sent].sendAt <= now {
		h.unsent -= h.q[h.sent].n
		h.sent++
	}
	return h.unsent
}

func (h *heldFrames) push(sendAt, at int64, b []byte) {
	if h.off > 0 && h.off >= len(h.buf)/2 {
		// Compact, now that what popDue returned has been written.
		h.buf = h.buf[:copy(h.buf, h.buf[h.off:])]
		h.off = 0
		h.q = h.q[:copy(h.q, h.q[h.head:])]
		h.sent -= h.head
		h.head = 0
	}
	h.buf = append(h.buf, b...)
	h.q = append(h.q, heldFrame{sendAt, at, len(b)})
	h.unsent += len(b)
}

// popDue removes the frames due at now and returns their bytes, valid
// until the next push.
func (h *heldFrames) popDue(now int64) []byte {
	h.unsentBytes(now) // the frames due have left: sent is past them
	start, n := h.off, 0
	for h.head < len(h.q) && h.q[h.head].at <= now {
		n += h.q[h.head].n
		h.head++
	}
	if n == 0 {
		return nil
	}
	h.off += n
	out := h.buf[start:h.off]
	if h.empty() {
		h.q, h.head, h.off, h.sent = h.q[:0], 0, 0, 0
		if cap(h.buf) > heldKeepCap {
			h.buf = nil // out keeps the old array until it is written
		} else {
			h.buf = h.buf[:0]
		}
	}
	return out
}
