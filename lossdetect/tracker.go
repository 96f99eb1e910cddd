package lossdetect

import (
	"cmp"
	"fmt"
	"math"
	"time"

	"github.com/sluicehq/sluice/window"
)

// Config sets the source side's ack timeouts. AckRequest scheduling (the share
// of the window and the quiet time) is part of the window's configuration,
// window.Config. The zero value is not valid; start from [DefaultConfig].
type Config struct {
	// MinAckTimeout is the smallest timeout before an unanswered ACKREQUEST or
	// OPEN is repeated. Default 2ms.
	MinAckTimeout time.Duration
	// MaxAckTimeout is the largest timeout, also after doubling on repeats.
	// Default 1s.
	MaxAckTimeout time.Duration
	// InitialAckTimeout is the timeout before the first round trip has been
	// measured. Default 20ms.
	InitialAckTimeout time.Duration
}

// DefaultConfig returns the defaults documented on [Config].
func DefaultConfig() Config {
	return Config{
		MinAckTimeout:     2 * time.Millisecond,
		MaxAckTimeout:     time.Second,
		InitialAckTimeout: 20 * time.Millisecond,
	}
}

// Validate reports the first field that is out of range.
func (c Config) Validate() error {
	switch {
	case c.MinAckTimeout <= 0:
		return fmt.Errorf("lossdetect: MinAckTimeout must be > 0, got %v", c.MinAckTimeout)
	case c.MaxAckTimeout < c.MinAckTimeout:
		return fmt.Errorf("lossdetect: MaxAckTimeout must be >= MinAckTimeout (%v), got %v", c.MinAckTimeout, c.MaxAckTimeout)
	case c.InitialAckTimeout < c.MinAckTimeout || c.InitialAckTimeout > c.MaxAckTimeout:
		return fmt.Errorf("lossdetect: InitialAckTimeout must be in [MinAckTimeout, MaxAckTimeout] = [%v, %v], got %v",
			c.MinAckTimeout, c.MaxAckTimeout, c.InitialAckTimeout)
	}
	return nil
}

// TrackerStats counts what a [Tracker] did and saw.
type TrackerStats struct {
	Requests      uint64 // ACKREQUESTs issued, not counting repeats
	Repeats       uint64 // ACKREQUESTs repeated after a timeout
	Opens         uint64 // OPENs issued, not counting repeats
	OpenRepeats   uint64 // OPENs repeated after a timeout
	Reopens       uint64 // calls to Reopen
	Acks          uint64 // acks received, of any verdict
	StaleAcks     uint64 // acks of another epoch
	DuplicateAcks uint64 // acks that carried nothing new
	InvalidAcks   uint64 // acks that contradict what was sent
	// CountMismatches counts applied acks whose Count is not the number of
	// seqs their Next moved over since the previous applied ack. The target
	// counts from its previous answer, so this is benign when an earlier ack
	// was lost, duplicated or overtaken; on a lossless in-order link it means
	// a broken target.
	CountMismatches uint64
	// CountExcess counts acks whose Count is larger than that. Only an ack
	// that overtook an older one can cause it, so on an in-order link (TCP)
	// it means a broken target, even when messages are lost.
	CountExcess uint64
	Rewinds     uint64 // times the window was rewound because of loss
	Resent      uint64 // messages queued for re-sending by those rewinds
	RTTSamples  uint64 // round trips measured
	SRTT        time.Duration
	RTTVar      time.Duration
	RTO         time.Duration // current base timeout, before doubling
}

// Outcome is what the [Tracker] did with one ack.
type Outcome struct {
	// Verdict is Accept when the ack was applied, Duplicate when it carried
	// nothing new, Stale when it belongs to another epoch and Invalid when it
	// contradicts what was sent; only Accept changes anything.
	Verdict Verdict
	// Freed is the number of messages acknowledged and freed from the window.
	Freed int
	// Lost is set when the ack revealed that messages from ResendFrom on were
	// lost; the window's transmit cursor has been moved back to ResendFrom.
	Lost       bool
	ResendFrom uint64
	// Resend is the number of messages that will be sent again.
	Resend int
	// Opened is set when the ack completed an OPEN handshake. After a
	// Reopen, sending may resume ([Tracker.CanSend]).
	Opened bool
}

// Tracker is the source side of one channel's protocol: it schedules OPENs
// and ACKREQUESTs, measures round trips, and turns acks into freed credit and
// rewinds of a [window.Sender]. Create it with [NewTracker].
//
// Typical use on the source's event loop:
//
//   - after NewTracker and after Reopen, call Tick: it returns the OPEN to
//     send. Send it before any data.
//   - while CanSend and w.Unsent() > 0: write w.Message(seq) for seq from
//     w.NextToSend(), then call OnSent(now, through) and send the ACKREQUEST it
//     may return.
//   - on each ACK call OnAck; the window is updated in place.
//   - at NextDeadline call Tick until it returns false and send what it
//     returns.
//
// A Tracker is not safe for concurrent use; it must be used from the goroutine
// that owns its window.
type Tracker struct {
	cfg   Config
	w     *window.Sender
	epoch uint64
	quiet int64
	drain int64 // least time between two drain-time requests

	waiting     bool // reopened: no data until the Open ack
	openDue     bool // an OPEN must be sent at the next Tick
	openOut     bool // an OPEN was sent and not answered
	openAt      int64
	openRepeats int

	reqOut     bool // an ACKREQUEST was sent and not answered
	reqSeq     uint64
	reqAt      int64
	reqRepeats int

	lastSent int64 // when OnSent was last called
	lastAck  Ack   // the last applied ack, to recognise copies of it

	srtt, rttvar, rto int64
	hasRTT            bool

	stats TrackerStats
}

// NewTracker returns the source side of a channel at epoch whose retained
// messages live in w. isNew says the target has never seen this source at
// this epoch: data may follow the OPEN at once. Otherwise (a re-opened
// channel) CanSend stays false until the Open ack arrives. Either way the
// first Tick returns the OPEN to send. It panics if cfg is not valid.
func NewTracker(cfg Config, w *window.Sender, epoch uint64, isNew bool) *Tracker {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	t := &Tracker{
		cfg:     cfg,
		w:       w,
		epoch:   epoch,
		quiet:   int64(w.Config().QuietAfter),
		drain:   int64(cmp.Or(w.Config().DrainEvery, w.Config().QuietAfter)),
		waiting: !isNew,
		openDue: true,
		rto:     int64(cfg.InitialAckTimeout),
	}
	return t
}

// Epoch is the channel's epoch.
func (t *Tracker) Epoch() uint64 { return t.epoch }

// Window is the window the Tracker drives.
func (t *Tracker) Window() *window.Sender { return t.w }

// CanSend reports whether data may be sent: false from Reopen (or NewTracker
// with isNew false) until the Open ack.
func (t *Tracker) CanSend() bool { return !t.waiting }

// Outstanding returns the ACKREQUEST that is waiting for its answer, if any.
func (t *Tracker) Outstanding() (AckRequest, bool) {
	return AckRequest{Epoch: t.epoch, Seq: t.reqSeq}, t.reqOut
}

// Stats returns the counters and the current round-trip estimate.
func (t *Tracker) Stats() TrackerStats {
	s := t.stats
	s.SRTT, s.RTTVar, s.RTO = time.Duration(t.srtt), time.Duration(t.rttvar), time.Duration(t.rto)
	return s
}

// timeout is the base timeout doubled once per repeat, capped at
// MaxAckTimeout.
func (t *Tracker) timeout(repeats int) int64 {
	d, limit := t.rto, int64(t.cfg.MaxAckTimeout)
	for range repeats {
		if d >= limit/2 {
			return limit
		}
		d *= 2
	}
	return min(d, limit)
}

// sample folds one round trip into the estimate (RFC 6298, section 2).
func (t *Tracker) sample(rtt int64) {
	rtt = max(rtt, 0)
	if !t.hasRTT {
		t.srtt, t.rttvar, t.hasRTT = rtt, rtt/2, true
	} else {
		t.rttvar = (3*t.rttvar + absDiff(t.srtt, rtt)) / 4
		t.srtt = (7*t.srtt + rtt) / 8
	}
	t.rto = min(max(t.srtt+4*t.rttvar, int64(t.cfg.MinAckTimeout)), int64(t.cfg.MaxAckTimeout))
	t.stats.RTTSamples++
}

func absDiff(a, b int64) int64 {
	if a > b {
		return a - b
	}
	return b - a
}

// request issues a new ACKREQUEST for everything sent so far.
func (t *Tracker) request(now int64) AckRequest {
	t.reqOut, t.reqSeq, t.reqAt, t.reqRepeats = true, t.w.NextToSend(), now, 0
	t.w.MarkRequested()
	t.stats.Requests++
	return AckRequest{Epoch: t.epoch, Seq: t.reqSeq}
}

// OnSent records that the messages below through have been written (it calls
// w.MarkSent(through); calling w.MarkSent first is fine) and returns an
// ACKREQUEST to send now if a share of the window has been sent since the
// last one. A newer request supersedes the outstanding one. While CanSend is
// false nothing should be sent; OnSent then returns no request.
func (t *Tracker) OnSent(now int64, through uint64) (req AckRequest, ok bool) {
	if err := t.w.MarkSent(through); err != nil {
		return AckRequest{}, false
	}
	t.lastSent = now
	if t.waiting || !t.w.RequestDue() {
		return AckRequest{}, false
	}
	return t.request(now), true
}

// OnDrained tells the tracker that everything pushed so far has been sent
// and the sender has nothing more for now. If messages are unacknowledged
// and no ACKREQUEST is outstanding, it returns one to send after the data:
// the tail of a burst is acknowledged at once instead of after the quiet
// timer, and a sparse channel (a message now and then, as each of many
// channels sees) needs no timer at all. At most one request is outstanding,
// as with every other request, and drain-time requests come at most once per
// window.Config.DrainEvery (a busy channel drains after nearly every batch;
// its tail is then left to the quiet timer), so control traffic stays
// bounded.
func (t *Tracker) OnDrained(now int64) (req AckRequest, ok bool) {
	if t.waiting || t.reqOut || t.w.NextToSend() <= t.w.Acked() || (t.stats.Requests > 0 && now-t.reqAt < t.drain) {
		return AckRequest{}, false
	}
	return t.request(now), true
}

// OnAck applies an ACK and says what happened; see [Outcome]. It never
// panics: acks of another epoch, acks for messages never sent and acks older
// than what is already applied are dropped with a verdict and counted.
//
// A normal ack frees everything below a.Next. If it answers the outstanding
// ACKREQUEST and a.Next < a.ReqSeq, the messages from a.Next on were lost and
// the window is rewound to a.Next; an ack of an older request only frees
// credit (the outstanding one's answer, or its repeat, decides about loss),
// which keeps one loss from causing one rewind per request in flight. For
// the same reason an ack that reports what the last applied one did (the
// same ReqSeq and Next: a copy of it, or a second answer to the same
// request, which counts nothing) is a Duplicate, even when the outstanding
// request has the same seq, except that an ack that counts nothing (Count
// 0) is taken once that request has been repeated: the messages re-sent
// after its loss report were lost too.
//
// An Open ack frees everything below a.Next; after Reopen it rewinds the
// window to a.Next and allows sending again. A brand-new channel sends
// right after its OPEN and does not rewind on the Open ack, which may come
// long after more data went out; loss in that data is found by the
// AckRequests that follow it. An Open ack
// whose Next is below its ReqSeq (the OPEN's firstSeq) is Invalid: the target
// expects messages this source may have freed, and the channel must be
// closed.
func (t *Tracker) OnAck(now int64, a Ack) Outcome {
	t.stats.Acks++
	if a.Epoch != t.epoch {
		t.stats.StaleAcks++
		return Outcome{Verdict: Stale}
	}
	if high := t.w.SentHigh(); a.Next > high || a.ReqSeq > high {
		t.stats.InvalidAcks++
		return Outcome{Verdict: Invalid}
	}
	if a.Open && t.openOut {
		return t.onOpenAck(now, a)
	}
	prevAcked := t.w.Acked()
	// An ack equal to the last applied one is a copy of it (the link
	// duplicated it, or the target answered a duplicate of its request),
	// and taking a copy for the answer to a newer request with the same seq
	// would rewind a second time, re-sending what is still on its way. A
	// second answer to the same request reports the same Next and ReqSeq
	// with nothing new (Count 0), whatever the first one counted; so does
	// the answer to a newer request with that seq when everything re-sent
	// since the first was lost too. That answer is believed once the
	// request has been repeated, a timeout after it went out with no answer
	// that moved Next; until then it cannot be told from a copy.
	last := t.lastAck
	sameReport := a.Open == last.Open && a.Epoch == last.Epoch && a.ReqSeq == last.ReqSeq && a.Next == last.Next
	isCopy := sameReport && (a.Count > 0 && a.Count == last.Count || a.Count == 0 && t.reqRepeats == 0)
	if isCopy || a.Next < prevAcked || (a.Next == prevAcked && !(t.reqOut && a.ReqSeq == t.reqSeq)) {
		t.stats.DuplicateAcks++
		return Outcome{Verdict: Duplicate}
	}
	t.lastAck = a
	freed, _ := t.w.Ack(a.Next) // cannot fail: checked against SentHigh above
	out := Outcome{Verdict: Accept, Freed: freed}
	if a.Open || t.waiting {
		// A repeated Open ack, or the answer to a request of the broken
		// connection: the target has what it says, but where to resume is
		// decided by the outstanding OPEN's answer.
		return out
	}
	// The target counts what it accepted since its previous answer, which is
	// at most what Next moved over since the previous applied ack.
	if diff := a.Next - prevAcked; a.Count > diff {
		t.stats.CountExcess++
		t.stats.CountMismatches++
	} else if a.Count < diff && a.Next >= a.ReqSeq {
		t.stats.CountMismatches++
	}
	if t.reqOut && a.ReqSeq == t.reqSeq {
		if t.reqRepeats == 0 {
			t.sample(now - t.reqAt)
		}
		t.reqOut = false
		if a.Next < a.ReqSeq {
			t.rewind(a.Next, &out)
		}
	}
	if t.reqOut && a.Next >= t.reqSeq {
		t.reqOut = false // answered implicitly: the target is past it
	}
	return out
}

func (t *Tracker) onOpenAck(now int64, a Ack) Outcome {
	if a.Next < a.ReqSeq {
		// The target did not start at the firstSeq of the OPEN: it expects
		// messages this source may have freed. The two cannot agree.
		t.stats.InvalidAcks++
		return Outcome{Verdict: Invalid}
	}
	t.lastAck = a
	freed, _ := t.w.Ack(a.Next)
	out := Outcome{Verdict: Accept, Freed: freed, Opened: true}
	if t.openRepeats == 0 {
		t.sample(now - t.openAt)
	}
	// An ack that overtook this one may have freed beyond a.Next already;
	// the target has everything below Acked() either way.
	resume := max(a.Next, t.w.Acked())
	// Only a re-opened channel resumes from the target's next expected
	// seq. A new channel sends right after its OPEN, and a slow target may
	// answer the OPEN, or a repeat of it, long after more data went out:
	// that data is not lost, and loss in it is found by AckRequests.
	if t.waiting {
		t.rewind(resume, &out)
	}
	t.waiting, t.openOut = false, false
	if t.reqOut && resume >= t.reqSeq {
		t.reqOut = false
	}
	return out
}

// rewind moves the transmit cursor back to next (next >= Acked() holds: the
// window was just acked to it) and records the loss.
func (t *Tracker) rewind(next uint64, out *Outcome) {
	if next >= t.w.NextToSend() {
		return // nothing sent from next on since the last rewind
	}
	n, err := t.w.Rewind(next)
	if err != nil {
		return
	}
	out.Lost, out.ResendFrom, out.Resend = true, next, n
	t.stats.Rewinds++
	t.stats.Resent += uint64(n)
}

// Tick returns the next control message that is due at now, if any: the
// OPEN after NewTracker or Reopen, a repeated OPEN or ACKREQUEST whose
// timeout expired (a repeat asks for everything sent so far, so its seq may
// be newer), or an ACKREQUEST because the channel has been quiet for
// QuietAfter with messages sent but not acknowledged. Call Tick until it
// returns false.
func (t *Tracker) Tick(now int64) (req AckRequest, ok bool) {
	if t.openDue {
		t.openDue, t.openOut, t.openAt, t.openRepeats = false, true, now, 0
		t.stats.Opens++
		return AckRequest{Open: true, Epoch: t.epoch, Seq: t.w.Acked()}, true
	}
	if t.openOut && now-t.openAt >= t.timeout(t.openRepeats) {
		t.openAt = now
		t.openRepeats++
		t.stats.OpenRepeats++
		return AckRequest{Open: true, Epoch: t.epoch, Seq: t.w.Acked()}, true
	}
	if t.waiting {
		return AckRequest{}, false
	}
	if t.reqOut {
		if now-t.reqAt < t.timeout(t.reqRepeats) {
			return AckRequest{}, false
		}
		t.reqSeq, t.reqAt = t.w.NextToSend(), now
		t.reqRepeats++
		t.w.MarkRequested()
		t.stats.Repeats++
		return AckRequest{Epoch: t.epoch, Seq: t.reqSeq}, true
	}
	if t.w.NextToSend() > t.w.Acked() && now-t.lastSent >= t.quiet {
		return t.request(now), true
	}
	return AckRequest{}, false
}

// NextDeadline returns when Tick next has something to do, and false if
// nothing is scheduled (nothing unacknowledged, nothing outstanding). A
// deadline of math.MinInt64 means "now": an OPEN is due.
func (t *Tracker) NextDeadline() (int64, bool) {
	if t.openDue {
		return math.MinInt64, true
	}
	d, ok := int64(math.MaxInt64), false
	if t.openOut {
		d, ok = t.openAt+t.timeout(t.openRepeats), true
	}
	if t.waiting {
		return d, ok
	}
	switch {
	case t.reqOut:
		d, ok = min(d, t.reqAt+t.timeout(t.reqRepeats)), true
	case t.w.NextToSend() > t.w.Acked():
		d, ok = min(d, t.lastSent+t.quiet), true
	}
	return d, ok
}

// Reopen records that the connection carrying the channel broke: nothing is
// sent until a new OPEN (returned by the next Tick) has been answered. The
// outstanding ACKREQUEST is forgotten, since its answer may never come.
func (t *Tracker) Reopen(now int64) {
	t.waiting, t.openDue, t.openOut = true, true, false
	t.reqOut, t.reqRepeats = false, 0
	t.lastSent = now
	t.stats.Reopens++
}
