// Package flow is the sending side of one channel as a state machine
// without I/O: a window.Sender, which retains the messages until they are
// acknowledged, and the lossdetect.Tracker that drives it. The transport
// feeds it events (a push, room in a batch, an ack, a timer) with the time
// passed in, and acts on what comes back: messages and OPEN and ACKREQUEST
// frames to write, credit and window memory freed, or a verdict that the
// channel must be closed. Nothing else touches the window.
//
// It lives under transport/internal because it binds the window and the
// tracker to the wire's run encoding, which only the transport needs; like
// window and lossdetect it has no I/O, no goroutines and no clock, and is
// tested by seeded simulation (sim_test.go).
//
// A Source is not safe for concurrent use: the transport holds its
// channel's lock around every call.
package flow

import (
	"encoding/binary"
	"sort"

	"github.com/sluicehq/sluice/lossdetect"
	"github.com/sluicehq/sluice/window"
	"github.com/sluicehq/sluice/wire"
)

// Effects is what an event asks of the transport.
type Effects struct {
	// Requests are the OPENs and ACKREQUESTs to write, in order, after the
	// data the event produced. The slice is valid until the next call.
	Requests []lossdetect.AckRequest
	// Freed is the number of messages acknowledged: credit grew.
	Freed int
	// Released is the window memory (bytes) given back, which the caller
	// had charged for it.
	Released int
	// Resent is the number of messages a Fill wrote again after a loss.
	Resent int
	// Invalid means the receiver acknowledged what was never sent, or asked
	// to resume before what it had acknowledged: the two sides cannot agree
	// and the channel must be closed. The Source sends nothing more.
	Invalid bool
}

// Stats counts what a Source did.
type Stats struct {
	Sent, Bytes, Resent uint64 // messages and payload bytes pushed; messages written again
	Unacked, Unsent     int    // messages retained, and those of them waiting to be written
	UnackedBytes        int    // their payload
	WindowBytes         int    // the window's memory (window.Sender.Footprint)
	Tracker             lossdetect.TrackerStats
}

// Source is the sending side of one channel at one epoch.
type Source struct {
	win   *window.Sender
	trk   *lossdetect.Tracker // nil until the first Attach
	cfg   lossdetect.Config
	epoch uint64
	first uint64 // the first message's sequence number

	attached    bool // on a connection (Attach, until Detach)
	openPending bool // attached: the next Fill hands out the OPEN first
	invalid     bool // an Invalid verdict: nothing more is sent

	// lastTs is the timestamp of the message pushed last, from which the
	// next one's delta is encoded; head is scratch for that encoding.
	lastTs int64
	head   [wire.MaxMessageHeadLen]byte

	bytes, resent uint64                  // payload bytes pushed; messages written again
	lastResent    int                     // scratch of Effects.Resent
	reqs          []lossdetect.AckRequest // scratch of Effects.Requests
}

// New returns the source side of a channel at epoch whose first message
// gets sequence number firstSeq, with a window of wcfg whose rings come
// from pool (nil: the heap) and a tracker of lcfg. Both configurations must
// be valid.
func New(wcfg window.Config, lcfg lossdetect.Config, epoch, firstSeq uint64, pool *window.Pool) *Source {
	w := window.NewSender(wcfg, firstSeq)
	w.UsePool(pool)
	return &Source{win: w, cfg: lcfg, epoch: epoch, first: firstSeq}
}

// Attach records that the channel was put on a connection: the next Fill
// returns the OPEN before anything else. The first Attach opens a new
// channel, which may send data right after its OPEN; a later one re-opens it,
// and nothing is sent until the receiver's answer to the OPEN says where to
// resume.
func (s *Source) Attach(now int64) {
	if s.trk == nil {
		s.trk = lossdetect.NewTracker(s.cfg, s.win, s.epoch, true)
	} else {
		s.trk.Reopen(now)
	}
	s.attached, s.openPending = true, true
}

// Detach records that the connection carrying the channel broke: nothing
// is sent and no timer is due until the next Attach.
func (s *Source) Detach() { s.attached = false }

// Attached reports whether the channel is on a connection.
func (s *Source) Attached() bool { return s.attached }

// live reports whether the Source may send: attached and not stopped by an
// Invalid verdict.
func (s *Source) live() bool { return s.attached && !s.invalid }

// PushCost returns the window memory a Push of a payload of size bytes
// with timestamp ts would add, and whether the window has credit for it.
func (s *Source) PushCost(ts int64, size int) (cost int, ok bool) {
	return s.win.PushCost(wire.MessageHeadLen(s.lastTs, ts, size) + size)
}

// Push retains one message, in its wire encoding (the timestamp delta from
// the message before it, the length, the payload), so that Fill copies
// runs of messages as they are. It returns the bytes the message takes
// in the window, at most len(payload)+wire.MaxMessageHeadLen. It fails with
// window.ErrNoCredit when the window is full and window.ErrTooLarge when the
// message can never fit; the payload is copied.
func (s *Source) Push(ts int64, payload []byte) (stored int, err error) {
	head := wire.AppendMessageHead(s.head[:0], s.lastTs, ts, len(payload))
	if _, err := s.win.PushHead(ts, head, payload); err != nil {
		return 0, err
	}
	s.lastTs = ts
	s.bytes += uint64(len(payload))
	return len(head) + len(payload), nil
}

// TryPush is Push for a message the window takes without growing its
// rings (see window.Sender.TryPushHead): it reports false, having done
// nothing, where Push would need more window memory or credit; the caller
// then asks PushCost and pushes with Push.
func (s *Source) TryPush(ts int64, payload []byte) (stored int, ok bool) {
	head := s.shortHead(ts, len(payload))
	if head == nil {
		head = wire.AppendMessageHead(s.head[:0], s.lastTs, ts, len(payload))
	}
	if _, ok := s.win.TryPushHead(ts, head, payload); !ok {
		return 0, false
	}
	s.lastTs = ts
	s.bytes += uint64(len(payload))
	return len(head) + len(payload), true
}

// TryPushRun is TryPush for each of msgs in order, stopping at the first
// that TryPush would refuse or whose payload is longer than maxPayload: it
// returns how many it pushed. The caller pushes the one it stopped at (if
// any) by the general path, which says why it cannot be pushed. Its loop
// body is TryPush's, written out: a call of TryPush per message cost 21
// instructions more (callgrind).
func (s *Source) TryPushRun(msgs []wire.Message, maxPayload int) int {
	for i := range msgs {
		m := &msgs[i]
		if len(m.Payload) > maxPayload {
			return i
		}
		head := s.shortHead(m.Ts, len(m.Payload))
		if head == nil {
			head = wire.AppendMessageHead(s.head[:0], s.lastTs, m.Ts, len(m.Payload))
		}
		if _, ok := s.win.TryPushHead(m.Ts, head, m.Payload); !ok {
			return i
		}
		s.lastTs = m.Ts
		s.bytes += uint64(len(m.Payload))
	}
	return len(msgs)
}

// shortHead writes the head of a message of size bytes at ts, after the
// last one pushed, into s.head and returns it if it is the common two-byte
// head, else nil (the caller then calls wire.AppendMessageHead). It
// inlines: a call of AppendMessageHead for every message was about a tenth
// of a push's instructions (callgrind: 25 of 221).
func (s *Source) shortHead(ts int64, size int) []byte {
	if d, n, ok := wire.ShortMessageHead(s.lastTs, ts, size); ok {
		// One two-byte store: the window reads the head back as two bytes
		// at once, which two one-byte stores cannot forward to (a stall on
		// every message).
		binary.LittleEndian.PutUint16(s.head[:2], uint16(d)|uint16(n)<<8)
		return s.head[:2]
	}
	return nil
}

// Ready reports whether the channel has messages to write and may write
// them now.
func (s *Source) Ready() bool {
	return s.live() && s.trk.CanSend() && s.win.Unsent() > 0
}

// Retained returns the messages retained (pushed, not yet acknowledged)
// and their payload bytes.
func (s *Source) Retained() (msgs, bytes int) { return s.win.Retained() }

// UnsentBytes is the bytes, as stored, of the messages waiting to be sent;
// see window.Sender.UnsentBytes.
func (s *Source) UnsentBytes() int { return s.win.UnsentBytes() }

// Progress returns the sequence number up to which messages have been
// acknowledged and the next one to be pushed.
func (s *Source) Progress() (acked, next uint64) { return s.win.Acked(), s.win.NextSeq() }

// Drained reports whether every message pushed has been acknowledged.
func (s *Source) Drained() bool { return s.win.Acked() == s.win.NextSeq() }

// Footprint returns the window's memory; see window.Sender.Footprint.
func (s *Source) Footprint() int { return s.win.Footprint() }

// Trim gives back the window memory it does not need for what it retains
// and returns how much; see window.Sender.Trim.
func (s *Source) Trim() int { return s.win.Trim() }

// Fill appends to dst the run of channel num's unsent messages that fits in
// room bytes of a DATA body. A batch with nothing in it yet (force) takes at
// least one message, however large. It returns the extended dst, the
// messages and their bytes as Push counted them, and whether unsent
// messages remain; the OPEN (first, after Attach) and ACKREQUESTs due are
// in the effects, to be written after the data.
func (s *Source) Fill(now int64, dst []byte, num uint32, room int, force bool) (out []byte, n, bytes int, more bool, e Effects) {
	s.reqs, s.lastResent = s.reqs[:0], 0
	out, n, bytes, more = s.fill(now, dst, num, room, force)
	e.Requests, e.Resent = s.reqs, s.lastResent
	return out, n, bytes, more, e
}

func (s *Source) fill(now int64, dst []byte, num uint32, room int, force bool) (out []byte, n, bytes int, more bool) {
	if !s.live() {
		return dst, 0, 0, false
	}
	if s.openPending {
		s.openPending = false
		s.tick(now)
	}
	win, trk := s.win, s.trk
	unsent := win.Unsent()
	if !trk.CanSend() || unsent == 0 {
		return dst, 0, 0, false
	}
	first := win.NextToSend()
	// The messages are stored encoded, each timestamp a delta from the one
	// pushed before it: the run's base is the first message's timestamp
	// less its delta, wherever the run starts.
	ts, _ := win.Message(first)
	delta, _ := wire.MessageDelta(win.Stored(first)) // Push encoded it
	h := wire.RunHeader{Channel: num, FirstSeq: first, Count: unsent, BaseTs: ts - delta}
	avail := room - wire.RunHeaderLen(h) // the header of all unsent, at least this run's
	n = sort.Search(unsent, func(k int) bool { return win.StoredLen(first, k+1) > avail })
	if n == 0 {
		if !force {
			return dst, 0, 0, true
		}
		n = 1
	}
	if high := win.SentHigh(); first < high {
		r := min(high-first, uint64(n))
		s.resent += r
		s.lastResent = int(r)
	}
	h.Count = n
	out = win.AppendStored(wire.AppendRunHeader(dst, h), first, n)
	bytes = win.StoredLen(first, n)
	if req, ok := trk.OnSent(now, first+uint64(n)); ok {
		s.reqs = append(s.reqs, req)
	}
	more = n < unsent
	if !more {
		// Drained: ask for the tail's ack now rather than on the quiet
		// timer (a channel that sends now and then needs no timer).
		if req, ok := trk.OnDrained(now); ok {
			s.reqs = append(s.reqs, req)
		}
	}
	return out, n, bytes, more
}

// OnAck applies an ACK from the receiver. The tracker's outcome says what
// was freed; an Invalid verdict stops the Source for good.
func (s *Source) OnAck(now int64, a lossdetect.Ack) Effects {
	if s.trk == nil || s.invalid {
		return Effects{}
	}
	fp := s.win.Footprint()
	out := s.trk.OnAck(now, a)
	if out.Verdict == lossdetect.Invalid {
		s.invalid = true
		return Effects{Invalid: true}
	}
	return Effects{Freed: out.Freed, Released: fp - s.win.Footprint()}
}

// Tick returns the OPENs and ACKREQUESTs due at now (repeats of unanswered
// ones, a request for the tail of a quiet channel). Until the OPEN after an
// Attach has gone out with a Fill, and while detached, nothing is due.
func (s *Source) Tick(now int64) Effects {
	s.reqs = s.reqs[:0]
	if s.live() && !s.openPending {
		s.tick(now)
	}
	return Effects{Requests: s.reqs}
}

func (s *Source) tick(now int64) {
	for {
		req, ok := s.trk.Tick(now)
		if !ok {
			return
		}
		s.reqs = append(s.reqs, req)
	}
}

// NextDeadline returns when Tick next has something to do, and false if
// nothing is scheduled. While the OPEN waits for a Fill, and while
// detached, nothing is.
func (s *Source) NextDeadline() (int64, bool) {
	if !s.live() || s.openPending {
		return 0, false
	}
	return s.trk.NextDeadline()
}

// Stats returns the Source's counters.
func (s *Source) Stats() Stats {
	// The window numbers the messages from firstSeq (New).
	st := Stats{Sent: s.win.NextSeq() - s.first, Bytes: s.bytes, Resent: s.resent, Unsent: s.win.Unsent(), WindowBytes: s.win.Footprint()}
	st.Unacked, st.UnackedBytes = s.win.Retained()
	if s.trk != nil {
		st.Tracker = s.trk.Stats()
	}
	return st
}
