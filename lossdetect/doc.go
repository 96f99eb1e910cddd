// Package lossdetect is the reference for Sluice's per-channel delivery
// protocol: sequence and epoch checks on the target, AckRequest scheduling and
// ack verdicts on the source. It is a pair of state machines with no I/O, no
// goroutines and no clock of its own: time comes in as now, a count of
// nanoseconds of a monotonic clock with any origin, and every effect comes
// back as a return value for the transport to carry out.
//
// # Channels, sequence numbers and epochs
//
// A channel carries messages from one source task to one target task. The
// source's incarnation is its epoch: a restarted task opens its channels with
// a higher epoch. Within a channel, messages have consecutive uint64 sequence
// numbers starting at the channel's first sequence number. The source keeps
// every sent-but-unacknowledged message in its window (package window) so that
// it can send it again.
//
// # Messages of the protocol
//
//	source -> target   OPEN(epoch, firstSeq)   the channel (re)starts; firstSeq is the source's first retained seq
//	source -> target   DATA(epoch, seq, ...)   one message
//	source -> target   ACKREQUEST(epoch, seq)  "I have sent everything before seq"
//	target -> source   ACK(open, epoch, reqSeq, count, next)
//
// The [Receiver] (target side) accepts a DATA only if its seq is the next one
// it expects; anything else is dropped: a seq below it is a [Duplicate], a seq
// above it is a [Gap] (something before it was lost, and the source will send
// everything from the gap again: go-back-N). It answers an ACKREQUEST only
// once its task has consumed every message it accepted ([Receiver.Consumed]),
// so an ack means "received and consumed" and frees credit at the source: a
// slow task slows its sources down instead of growing a queue. The ACK says
// next, the next expected seq, and count, how many messages it accepted since
// the previous answer (Gearpump's loss check, kept as a consistency check).
//
// The [Tracker] (source side) sends an ACKREQUEST after a share of the window
// has been sent since the last one (window.Config.AckRequestShare) and when the
// channel has been quiet for window.Config.QuietAfter with something
// unacknowledged, so the tail of a slow stream is acknowledged too. On an ACK
// it frees everything below next; if next is below the request's seq, the
// messages from next on were lost and it rewinds the window's transmit cursor
// to next. An unanswered request is repeated after an adaptive timeout (RTO:
// srtt + 4*rttvar as in RFC 6298, from request-to-ack round trips of requests
// that were not repeated, clamped to [MinAckTimeout, MaxAckTimeout] and
// doubled on each repeat), so neither a lost request nor a lost ack can stall
// a channel. Only the newest request is tracked; acks of older ones still
// free credit.
//
// # Opening and re-opening
//
// Every channel starts with an OPEN. A brand-new channel (one the target has
// never seen at this epoch) may send data right behind its OPEN. After a
// connection breaks ([Tracker.Reopen]) the source stops, sends a new OPEN on
// the new connection and waits for its answer, an ACK with Open set, which
// the target sends once it has consumed everything it accepted: its next says
// where to resume. The source frees everything below next and rewinds to
// next. OPENs are repeated on the same timeout as ACKREQUESTs.
//
// # Fencing
//
// The target keeps the highest epoch it has seen. DATA, ACKREQUEST and OPEN of
// an older epoch are dropped as [Stale] (a zombie: a source that was replaced
// but still sends). An OPEN of a higher epoch resets the target to that OPEN's
// firstSeq. DATA or ACKREQUEST of a higher epoch whose OPEN has not arrived yet
// are dropped as [Unopened]. The source drops ACKs of any epoch but its own as
// [Stale]. Together with "accept only next", this makes delivery on a channel
// exactly-once and in order while both tasks live, however the link drops,
// duplicates, reorders or delays messages.
//
// Neither [Receiver] nor [Tracker] is safe for concurrent use: each belongs to
// the event loop that owns its channel.
package lossdetect

import "fmt"

// Verdict is what one side decided about one incoming protocol message.
type Verdict uint8

// Verdicts.
const (
	// Accept: the message was applied (data accepted, request recorded, ack
	// applied).
	Accept Verdict = iota
	// Duplicate: the message carries nothing new (data already accepted, an
	// ack older than one already applied); dropped.
	Duplicate
	// Gap: data beyond the next expected seq; something before it was lost.
	// Dropped; the source sends it again after it rewinds.
	Gap
	// Stale: the message belongs to an epoch that is not the current one
	// (a zombie source, or an ack meant for another incarnation); dropped.
	Stale
	// Unopened: data or a request for an epoch whose OPEN has not arrived;
	// dropped. The source repeats its OPEN and then re-sends.
	Unopened
	// Invalid: the message contradicts what this side knows (an ack for
	// messages never sent, a seq that cannot exist); dropped and counted.
	// On an Open ack it means the two sides cannot agree where to resume and
	// the channel should be closed.
	Invalid
)

func (v Verdict) String() string {
	switch v {
	case Accept:
		return "accept"
	case Duplicate:
		return "duplicate"
	case Gap:
		return "gap"
	case Stale:
		return "stale"
	case Unopened:
		return "unopened"
	case Invalid:
		return "invalid"
	}
	return fmt.Sprintf("verdict(%d)", uint8(v))
}

// Ack is the target's answer to an ACKREQUEST or an OPEN.
type Ack struct {
	// Open is set when the ack answers an OPEN; then ReqSeq echoes the OPEN's
	// firstSeq.
	Open bool
	// Epoch is the epoch of the channel the ack belongs to.
	Epoch uint64
	// ReqSeq is the seq of the ACKREQUEST this ack answers.
	ReqSeq uint64
	// Count is the number of messages accepted since the previous answer.
	Count uint64
	// Next is the next seq the target expects: everything below it was
	// received and consumed.
	Next uint64
}

// AckRequest is a control message the source must send now: an ACKREQUEST,
// or, with Open set, an OPEN.
type AckRequest struct {
	// Open means: send OPEN(Epoch, Seq), where Seq is the first retained seq
	// (firstSeq). Otherwise send ACKREQUEST(Epoch, Seq): "I have sent
	// everything before Seq".
	Open  bool
	Epoch uint64
	Seq   uint64
}
