package lossdetect

import "math"

// ReceiverStats counts what a [Receiver] saw.
type ReceiverStats struct {
	Accepted    uint64 // data accepted
	Duplicates  uint64 // data below next
	Gaps        uint64 // data above next
	Stale       uint64 // data, requests and opens of an older epoch
	Unopened    uint64 // data and requests of an epoch not opened yet
	Invalid     uint64 // data with a seq that cannot exist
	Opens       uint64 // OPENs accepted (including repeats and reconnects)
	Resets      uint64 // OPENs that started a new epoch
	Skipped     uint64 // seqs an OPEN of the current epoch skipped: the source dropped them
	AckRequests uint64 // ACKREQUESTs accepted
	Acks        uint64 // acks returned by Answer
}

// Receiver is the target side of one channel (source task, target task): it
// fences epochs, accepts only the next expected seq, and answers ACKREQUESTs
// and OPENs once the task has consumed everything accepted. Its zero value is
// not usable; create it with [NewReceiver].
//
// Typical use on the target's event loop: feed every incoming OPEN, DATA and
// ACKREQUEST to OnOpen, OnData, OnAckRequest (deliver DATA to the task only on
// [Accept]); report consumption with Consumed; after each of these, call
// Answer until it returns false and send the acks it returns.
//
// A Receiver is not safe for concurrent use.
type Receiver struct {
	open     bool // an OPEN has set epoch and next
	epoch    uint64
	next     uint64 // next expected seq
	consumed uint64 // the task has consumed every message below it
	lastNext uint64 // Next of the previous answer

	reqPending  bool
	reqSeq      uint64
	openPending bool
	openSeq     uint64

	// skips are the seqs OPENs of the current epoch skipped past messages
	// accepted but not yet consumed, in order: consumption passes over each
	// once the task has consumed everything below it, so that no answer
	// covers those messages before the task has them. Each follows at
	// least one such message (OPENs that skip with none between extend the
	// last), so they are no more than what waits for the task.
	skips []skip

	stats ReceiverStats
}

// skip is the seqs from through to-1, which the source dropped.
type skip struct{ from, to uint64 }

// NewReceiver returns a Receiver that has not seen any OPEN: it drops data and
// requests as [Unopened] until one arrives.
func NewReceiver() *Receiver { return &Receiver{} }

// Epoch is the highest epoch opened so far (0 before any OPEN).
func (r *Receiver) Epoch() uint64 { return r.epoch }

// Next is the next seq expected in the current epoch.
func (r *Receiver) Next() uint64 { return r.next }

// IsOpen reports whether an OPEN has been accepted.
func (r *Receiver) IsOpen() bool { return r.open }

// Stats returns the counters.
func (r *Receiver) Stats() ReceiverStats { return r.stats }

// check fences an incoming message's epoch and counts the drop.
func (r *Receiver) check(epoch uint64) (Verdict, bool) {
	switch {
	case r.open && epoch < r.epoch:
		r.stats.Stale++
		return Stale, false
	case !r.open || epoch > r.epoch:
		r.stats.Unopened++
		return Unopened, false
	}
	return Accept, true
}

// OnOpen applies an OPEN(epoch, firstSeq). An older epoch is [Stale]. A first
// or higher epoch resets the channel: next and consumed become firstSeq, and a
// pending request of the old epoch is forgotten. The current epoch (a
// reconnect) keeps next: the source resumes from it, since it retains every
// message the receiver has not acknowledged (firstSeq <= next). A firstSeq
// beyond next means the source dropped the messages between (it closed the
// channel without waiting for them) and opened it again where it left off:
// next moves up to firstSeq, and consumption passes over the seqs skipped
// once the task has consumed what was accepted before them (at once if it
// has), so that the OPEN's answer covers no message still waiting for the
// task; the seqs skipped are counted. In every accepted case an Open ack becomes pending
// (see [Receiver.Answer]).
func (r *Receiver) OnOpen(epoch, firstSeq uint64) Verdict {
	if r.open && epoch < r.epoch {
		r.stats.Stale++
		return Stale
	}
	switch {
	case !r.open || epoch > r.epoch:
		if r.open {
			r.stats.Resets++
		}
		r.open, r.epoch = true, epoch
		r.next, r.consumed, r.lastNext = firstSeq, firstSeq, firstSeq
		r.reqPending = false
		r.skips = r.skips[:0]
	case firstSeq > r.next:
		r.stats.Skipped += firstSeq - r.next
		switch n := len(r.skips); {
		case r.consumed == r.next:
			r.consumed, r.lastNext = firstSeq, firstSeq
		case n > 0 && r.skips[n-1].to == r.next:
			r.skips[n-1].to = firstSeq
		default:
			r.skips = append(r.skips, skip{r.next, firstSeq})
		}
		r.next = firstSeq
		r.reqPending = false
	}
	r.stats.Opens++
	r.openPending, r.openSeq = true, firstSeq
	return Accept
}

// OnData decides about one DATA(epoch, seq). Only [Accept] means the message
// is to be delivered to the task; every other verdict means drop it.
func (r *Receiver) OnData(epoch, seq uint64) Verdict {
	if v, ok := r.check(epoch); !ok {
		return v
	}
	switch {
	case seq < r.next:
		r.stats.Duplicates++
		return Duplicate
	case seq > r.next:
		r.stats.Gaps++
		return Gap
	case seq == math.MaxUint64: // next would wrap; window never assigns it
		r.stats.Invalid++
		return Invalid
	}
	r.next++
	r.stats.Accepted++
	return Accept
}

// AcceptRun is k calls of OnData for the consecutive seqs first, first+1,
// ..., first+k-1 in the common case that all of them are accepted: the
// epoch is the current one, first is Next() and no seq is one that cannot
// exist. It reports whether that was the case; if not, it changed nothing,
// and the caller decides message by message with OnData.
func (r *Receiver) AcceptRun(epoch, first uint64, k int) bool {
	if !r.open || epoch != r.epoch || first != r.next || k <= 0 || uint64(k) > math.MaxUint64-first {
		return false
	}
	r.next += uint64(k)
	r.stats.Accepted += uint64(k)
	return true
}

// OnAckRequest records an ACKREQUEST(epoch, seq) to be answered. If one is
// already pending, the higher seq is kept: a newer request supersedes.
func (r *Receiver) OnAckRequest(epoch, seq uint64) Verdict {
	if v, ok := r.check(epoch); !ok {
		return v
	}
	r.stats.AckRequests++
	if !r.reqPending || seq > r.reqSeq {
		r.reqSeq = seq
	}
	r.reqPending = true
	return Accept
}

// Consumed records that the task has consumed every message of the current
// epoch below through. Values beyond Next() are clamped to it, and consumption
// never goes backwards. The transport must not report consumption of messages
// of an older epoch after an OPEN of a newer one.
func (r *Receiver) Consumed(through uint64) {
	through = min(through, r.next)
	r.consumed = max(r.consumed, through)
	for len(r.skips) > 0 && r.consumed >= r.skips[0].from {
		s := r.skips[0]
		r.consumed = max(r.consumed, s.to)
		r.lastNext += s.to - s.from // Count is of messages the task consumed
		r.skips = r.skips[1:]
	}
}

// Answer returns the ack to send now, if any, and clears what it answers.
// Call it until it returns false.
//
// An OPEN is answered once the task has consumed everything accepted, so
// that its Next is exactly where a re-opened channel resumes. An ACKREQUEST
// is answered as soon as the task has consumed every message before it, or,
// when some of those never arrived, everything that did: the answer's Next
// is what the task has consumed, below which the source may free its
// window, and a Next below the request's seq tells the source what was
// lost. Answering once the messages before the request are consumed, rather
// than waiting for the task to drain everything accepted, keeps a fast
// stream's acknowledgements flowing while data keeps arriving. Count is
// the messages consumed since the previous answer.
func (r *Receiver) Answer() (Ack, bool) {
	if !r.open {
		return Ack{}, false
	}
	a := Ack{Epoch: r.epoch, Count: r.consumed - r.lastNext, Next: r.consumed}
	switch {
	case r.openPending && r.consumed == r.next:
		a.Open, a.ReqSeq = true, r.openSeq
		r.openPending = false
	case r.reqPending && (r.consumed >= r.reqSeq || r.consumed == r.next):
		a.ReqSeq = r.reqSeq
		r.reqPending = false
	default:
		return Ack{}, false
	}
	r.lastNext = r.consumed
	r.stats.Acks++
	return a, true
}
