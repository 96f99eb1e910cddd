// Package window is the source side of one channel's sliding window: credit
// in messages and bytes, the retained copies of every sent-but-unacknowledged
// message for go-back-N re-sending, and the counters that say when the next
// AckRequest is due.
//
// # How a message flows through a Sender
//
// Sequence numbers are per channel and consecutive from the channel's first
// sequence number. A [Sender] keeps three cursors over them, Acked() <=
// NextToSend() <= NextSeq(): the messages in [Acked, NextToSend) are retained
// and have been sent, those in [NextToSend, NextSeq) are retained and wait to
// be (re)sent.
//
//   - [Sender.Push] copies a payload into retention and gives it the next
//     sequence number, if the window has credit for it (at most
//     Config.MaxMessages messages and Config.MaxBytes payload bytes retained).
//     Without credit it returns [ErrNoCredit]; the caller waits for an ack.
//   - The transport reads the messages from NextToSend() on with
//     [Sender.Message], writes them, and moves the transmit cursor with
//     [Sender.MarkSent].
//   - When the receiver acknowledges "everything before next was received and
//     consumed", [Sender.Ack] frees those messages and returns their credit.
//   - When the receiver reports that messages from next on were lost,
//     [Sender.Rewind] moves the transmit cursor back so they are sent again
//     (go-back-N: the receiver drops everything after a gap, so everything
//     after it is sent again too).
//
// Deciding when an ack says "lost", epochs and timers live in package
// lossdetect, whose Tracker drives a Sender. The window only counts how much
// was sent since the last AckRequest: [Sender.RequestDue] says when that
// reaches Config.AckRequestShare of the window.
//
// # Memory
//
// Payloads are copied into one byte ring per Sender and message records into
// one record ring; both are allocated at the first Push and grow on demand
// (doubling) up to their bound, so a channel that never sent costs nothing
// and a busy one at most Config.MaxBytes plus a 32-byte record for each of
// Config.MaxMessages ([Config.MaxFootprint]). Once grown, Push, MarkSent and
// Ack allocate nothing. [Sender.Footprint] is what the rings take now and
// [Sender.PushCost] what a Push would add, so that a caller can bound the
// memory of many windows together; [Sender.Trim] gives back what a window
// does not retain. A payload is stored contiguously: when it does not
// fit before the end of the ring it starts again at the front, and the few
// bytes skipped at the end count against byte credit until the messages before
// them are acknowledged. The window therefore never holds more than MaxBytes,
// and the credit lost to that skipped tail is less than one payload.
//
// A Sender is not safe for concurrent use: it belongs to the one goroutine
// (event loop) that owns its channel.
package window

import (
	"errors"
	"fmt"
	"math"
	"time"
	"unsafe"
)

// Limits on a [Config], so that offsets fit the record ring's 32-bit fields.
const (
	// MaxMessagesLimit is the largest allowed Config.MaxMessages.
	MaxMessagesLimit = 1 << 24
	// MaxBytesLimit is the largest allowed Config.MaxBytes.
	MaxBytesLimit = 1 << 30
)

// Errors returned by [Sender].
var (
	// ErrNoCredit means the window is full: the payload fits once the receiver
	// acknowledges some of the retained messages.
	ErrNoCredit = errors.New("window: no credit: the window is full until the receiver acknowledges")
	// ErrTooLarge means a payload is larger than Config.MaxBytes and could never
	// fit in the window.
	ErrTooLarge = errors.New("window: payload is larger than the window's MaxBytes")
	// ErrSeqExhausted means the channel has used every sequence number below
	// math.MaxUint64; it must be re-opened with a new epoch.
	ErrSeqExhausted = errors.New("window: sequence numbers exhausted")
	// ErrAckBeyondSent means an ack claimed that messages were received that
	// were never sent; it is ignored.
	ErrAckBeyondSent = errors.New("window: ack for sequence numbers never sent")
	// ErrOutOfRange means a cursor was moved outside the retained messages.
	ErrOutOfRange = errors.New("window: sequence number outside the retained messages")
)

// Config bounds one channel's window. The zero value is not valid; start from
// [DefaultConfig].
type Config struct {
	// MaxMessages is the window in messages: at most this many messages are
	// retained (sent or not, but not yet acknowledged). Default 4096.
	MaxMessages int
	// MaxBytes is the window in payload bytes (with the heads of messages
	// pushed with [Sender.PushHead]). A single message larger than
	// MaxBytes is rejected with [ErrTooLarge]. Default 1 MiB.
	MaxBytes int
	// AckRequestShare is the share of the window (in messages or in bytes,
	// whichever is reached first) sent since the last AckRequest after which
	// the next AckRequest is due. In (0, 1]. Default 0.25.
	AckRequestShare float64
	// QuietAfter is how long a channel with unacknowledged messages may send
	// nothing before an AckRequest is sent anyway, so that the tail of a slow
	// stream is acknowledged. Used by lossdetect.Tracker. Default 200µs.
	QuietAfter time.Duration
	// DrainEvery is the least time between two AckRequests sent because
	// the channel drained (sent everything it had), which is how the tail
	// of a burst, and a channel that sends now and then, get acknowledged
	// without a timer. A channel sending at a steady moderate rate drains
	// after nearly every message; spacing these requests keeps its acks,
	// and the wake-ups of both sides' loops that each costs, few: on a
	// 2-core VM, 2 ms instead of 200 µs brought a two-process fixed-rate
	// p99 at 100,000 msgs/s from 0.72-0.87 ms to 0.57-0.64 ms
	// (results/window-and-acks). Zero means QuietAfter. Default 2ms.
	DrainEvery time.Duration
}

// DefaultConfig returns the defaults documented on [Config]. They come from
// measurement (transport's BenchmarkTransportWindowSweep, 100-byte
// messages, loopback): a window must cover the messages sent during one
// AckRequest round trip, or the producer waits for credit; 4096 messages
// and 1 MiB did on a 2-core machine, and larger windows were slower because
// the retained bytes no longer fit in the cache.
func DefaultConfig() Config {
	return Config{
		MaxMessages:     4096,
		MaxBytes:        1 << 20,
		AckRequestShare: 0.25,
		QuietAfter:      200 * time.Microsecond,
		DrainEvery:      2 * time.Millisecond,
	}
}

// MaxFootprint is the most memory a window with this configuration takes
// (see [Sender.Footprint]): MaxBytes of payload ring and a record for each
// of MaxMessages, rounded up to a power of two.
func (c Config) MaxFootprint() int { return c.MaxBytes + ceilPow2(c.MaxMessages)*recordSize }

// Validate reports the first field that is out of range.
func (c Config) Validate() error {
	switch {
	case c.MaxMessages < 1 || c.MaxMessages > MaxMessagesLimit:
		return fmt.Errorf("window: MaxMessages must be in [1, %d], got %d", MaxMessagesLimit, c.MaxMessages)
	case c.MaxBytes < 1 || c.MaxBytes > MaxBytesLimit:
		return fmt.Errorf("window: MaxBytes must be in [1, %d], got %d", MaxBytesLimit, c.MaxBytes)
	case !(c.AckRequestShare > 0 && c.AckRequestShare <= 1): // also rejects NaN
		return fmt.Errorf("window: AckRequestShare must be in (0, 1], got %v", c.AckRequestShare)
	case c.QuietAfter <= 0:
		return fmt.Errorf("window: QuietAfter must be > 0, got %v", c.QuietAfter)
	case c.DrainEvery < 0:
		return fmt.Errorf("window: DrainEvery must be >= 0, got %v", c.DrainEvery)
	}
	return nil
}

// record is one retained message: its timestamp and where it lies in the
// byte ring: n bytes from off, of which the first head are the caller's
// head (see [Sender.PushHead]) and the rest its payload.
type record struct {
	ts   int64
	end  uint64 // stream offset just past this message: bytes pushed up to and including it
	off  uint32
	n    uint32
	head uint32
}

// Initial ring sizes; both rings are allocated at the first Push and double
// on demand up to the configured bound.
const (
	initialRecords = 4
	initialBytes   = 256
)

// recordSize is the memory one slot of the record ring takes.
const recordSize = int(unsafe.Sizeof(record{}))

// Sender is the source side of one channel's window. Create it with
// [NewSender].
//
// A Sender is not safe for concurrent use.
type Sender struct {
	cfg Config

	acked      uint64 // first retained (unacknowledged) seq
	nextToSend uint64 // transmit cursor
	nextSeq    uint64 // seq of the next Push
	sentHigh   uint64 // highest cursor ever passed to MarkSent: acks beyond it are bogus

	recs []record // ring indexed by seq & mask; len is a power of two
	mask uint64
	// slots is how many messages may be retained without growing recs:
	// len(recs), at most cfg.MaxMessages (one bound for TryPushHead).
	slots uint64

	buf      []byte // byte ring
	bhead    int    // offset of the oldest retained payload
	btail    int    // where the next payload is written
	wrapped  bool   // live data is [bhead, end of ring) and [0, btail)
	wrapSeq  uint64 // while wrapped: the first seq stored at the front of the ring
	payBytes int    // sum of retained message lengths (heads and payloads)
	pushed   uint64 // total bytes ever pushed: the stream offset of NextSeq
	sentOff  uint64 // the stream offset of NextToSend, for UnsentBytes

	// Ring shrinking: acks that emptied the window since the last look, and
	// the most retained in that time.
	empties             int
	peakBytes, peakMsgs int

	// AckRequest scheduling: messages and bytes passed to MarkSent since the
	// last MarkRequested, and the thresholds that make a request due.
	sinceMsgs, sinceBytes int
	dueMsgs, dueBytes     int

	pool *Pool // where rings come from and go back to; nil: the heap
}

// UsePool makes the Sender take its rings from p and give them back to it
// instead of allocating each and leaving the old ones to the garbage
// collector. Call it before the first Push. With a pool, a payload returned
// by [Sender.Message] stays valid only until the next Push, Ack or Trim,
// which may hand its ring to another Sender.
func (s *Sender) UsePool(p *Pool) { s.pool = p }

// NewSender returns an empty window whose first message gets sequence number
// firstSeq. It panics if cfg is not valid (check it with [Config.Validate]):
// a Config comes from the program, not from the network.
func NewSender(cfg Config, firstSeq uint64) *Sender {
	if err := cfg.Validate(); err != nil {
		panic(err)
	}
	s := &Sender{
		cfg:        cfg,
		acked:      firstSeq,
		nextToSend: firstSeq,
		nextSeq:    firstSeq,
		sentHigh:   firstSeq,
		dueMsgs:    max(1, int(math.Ceil(cfg.AckRequestShare*float64(cfg.MaxMessages)))),
		dueBytes:   max(1, int(math.Ceil(cfg.AckRequestShare*float64(cfg.MaxBytes)))),
	}
	return s
}

// Config returns the configuration the Sender was created with.
func (s *Sender) Config() Config { return s.cfg }

// Acked is the first unacknowledged sequence number: every message below it
// has been freed.
func (s *Sender) Acked() uint64 { return s.acked }

// NextSeq is the sequence number the next [Sender.Push] gets.
func (s *Sender) NextSeq() uint64 { return s.nextSeq }

// NextToSend is the transmit cursor: the first retained message that has not
// been sent since the last [Sender.Rewind].
func (s *Sender) NextToSend() uint64 { return s.nextToSend }

// SentHigh is the highest transmit cursor ever reached: every message below it
// has been sent at least once. An ack may not go beyond it.
func (s *Sender) SentHigh() uint64 { return s.sentHigh }

// Unsent is the number of retained messages waiting to be (re)sent:
// NextSeq() - NextToSend().
func (s *Sender) Unsent() int { return int(s.nextSeq - s.nextToSend) }

// UnsentBytes is the bytes the Unsent() messages take as stored (heads and
// payloads): what [Sender.AppendStored] would append for all of them.
func (s *Sender) UnsentBytes() int { return int(s.pushed - s.sentOff) }

// Retained returns the number of retained messages and the sum of their
// payload lengths (with their heads, for messages pushed with
// [Sender.PushHead]).
func (s *Sender) Retained() (msgs, bytes int) { return int(s.nextSeq - s.acked), s.payBytes }

// InFlight returns the number of messages sent at least once but not yet
// acknowledged, SentHigh() - Acked().
func (s *Sender) InFlight() int { return int(s.sentHigh - s.acked) }

// HasCredit reports whether a payload of size bytes can be pushed now.
func (s *Sender) HasCredit(size int) bool {
	_, ok := s.PushCost(size)
	return ok
}

// PushCost reports whether a payload of size bytes can be pushed now and,
// if so, how many bytes of ring memory the Push will allocate to hold it:
// 0 when it fits in the rings as they are. A caller that bounds the memory
// of many windows charges the cost before pushing (see [Sender.Footprint]).
func (s *Sender) PushCost(size int) (cost int, ok bool) {
	if size < 0 || size > s.cfg.MaxBytes || s.nextSeq == math.MaxUint64 {
		return 0, false
	}
	if int(s.nextSeq-s.acked) >= s.cfg.MaxMessages || s.payBytes+size > s.cfg.MaxBytes {
		return 0, false
	}
	if _, fits := s.place(size); !fits {
		if len(s.buf) >= s.cfg.MaxBytes {
			return 0, false // full size, and the free space is split
		}
		cost = s.grownBytes(size) - len(s.buf)
	}
	if int(s.nextSeq-s.acked) >= len(s.recs) {
		cost += (s.grownRecords() - len(s.recs)) * recordSize
	}
	return cost, true
}

// Footprint is the memory the window's rings take, in bytes: what it
// retains plus the room it has grown for. It changes only in Push (by
// [Sender.PushCost]), in Ack (an emptied window gives back memory it has
// not needed lately) and in [Sender.Trim].
func (s *Sender) Footprint() int { return len(s.buf) + len(s.recs)*recordSize }

// place returns where a payload of n bytes would go in the byte ring without
// growing it.
func (s *Sender) place(n int) (off int, ok bool) {
	switch {
	case s.nextSeq == s.acked: // empty: start at the front
		return 0, n <= len(s.buf)
	case s.wrapped:
		return s.btail, s.bhead-s.btail >= n
	case len(s.buf)-s.btail >= n:
		return s.btail, true
	default: // wrap to the front, skipping the tail
		return 0, s.bhead >= n
	}
}

// Push copies payload into the window and returns its sequence number. ts is
// the message's timestamp, kept with it for re-sending. The caller may reuse
// payload as soon as Push returns.
//
// Push returns [ErrTooLarge] if len(payload) > Config.MaxBytes, [ErrNoCredit]
// if the window has no room for it now, and [ErrSeqExhausted] once the
// sequence numbers run out.
func (s *Sender) Push(ts int64, payload []byte) (seq uint64, err error) {
	return s.PushHead(ts, nil, payload)
}

// PushHead is [Sender.Push] for a message kept with a head of the caller's
// in front of its payload, stored together so that [Sender.AppendStored]
// copies whole messages as they will go out (a transport keeps them in
// their wire encoding this way, and a batch is then one copy per run).
// Head and payload both count against byte credit: len(head)+len(payload)
// is the size [Sender.PushCost] and Config.MaxBytes refer to.
// [Sender.Message] returns the payload alone.
func (s *Sender) PushHead(ts int64, head, payload []byte) (seq uint64, err error) {
	n := len(head) + len(payload)
	if n > s.cfg.MaxBytes {
		return 0, ErrTooLarge
	}
	if s.nextSeq == math.MaxUint64 {
		return 0, ErrSeqExhausted
	}
	if int(s.nextSeq-s.acked) >= s.cfg.MaxMessages || s.payBytes+n > s.cfg.MaxBytes {
		return 0, ErrNoCredit
	}
	if _, fits := s.place(n); !fits {
		if len(s.buf) >= s.cfg.MaxBytes {
			return 0, ErrNoCredit
		}
		s.growBytes(n) // guarantees room
	}
	if int(s.nextSeq-s.acked) >= len(s.recs) {
		s.growRecords()
	}
	seq, ok := s.TryPushHead(ts, head, payload)
	if !ok {
		panic("window: no room for a message after checking credit and growing the rings")
	}
	return seq, nil
}

// TryPushHead is [Sender.PushHead] for a message that fits the rings as
// they are: it pushes only if the window has credit for the message and
// neither ring must grow for it, so that [Sender.Footprint] does not
// change, and otherwise reports false and does nothing. A caller that
// charges ring growth to a budget pushes with it first and, where it
// reports false, asks [Sender.PushCost] and pushes with PushHead; in the
// steady state of a busy channel every push takes this path, which checks
// credit once.
func (s *Sender) TryPushHead(ts int64, head, payload []byte) (seq uint64, ok bool) {
	n := len(head) + len(payload)
	seq = s.nextSeq
	if seq-s.acked >= s.slots || s.payBytes+n > s.cfg.MaxBytes || seq == math.MaxUint64 {
		return 0, false
	}
	off, fits := s.place(n)
	if !fits {
		return 0, false
	}
	if seq == s.acked {
		s.bhead, s.btail, s.wrapped = 0, 0, false
	} else if off == 0 && s.btail != 0 && !s.wrapped {
		s.wrapped, s.wrapSeq = true, seq
	}
	dst := s.buf[off : off+n]
	if len(head) == 2 && len(dst) >= 2 { // the common head: no loop, no call
		dst[0], dst[1] = head[0], head[1]
	} else {
		h := dst[:len(head)]
		for i := range h { // a head is a few bytes: cheaper than a call to copy
			h[i] = head[i]
		}
	}
	s.btail = off + n
	s.pushed += uint64(n)
	r := &s.recs[seq&s.mask]
	r.ts, r.end, r.off, r.n, r.head = ts, s.pushed, uint32(off), uint32(n), uint32(len(head))
	s.payBytes += n
	s.nextSeq = seq + 1
	copy(dst[len(head):], payload) // last: little is live across the call
	return seq, true
}

// grownBytes is the size growBytes(n) makes the byte ring.
func (s *Sender) grownBytes(n int) int {
	size := max(initialBytes, 2*len(s.buf))
	for size < s.payBytes+n {
		size *= 2
	}
	return min(size, s.cfg.MaxBytes)
}

// growBytes re-packs the retained payloads at the front of a larger ring that
// has room for n more bytes.
func (s *Sender) growBytes(n int) { s.repackBytes(s.grownBytes(n)) }

// repackBytes moves the retained payloads to the front of a new ring of size
// bytes, which must hold them.
func (s *Sender) repackBytes(size int) {
	var nb []byte
	if size > 0 {
		nb = s.pool.getBytes(size)
	}
	pos := 0
	for seq := s.acked; seq != s.nextSeq; seq++ {
		r := &s.recs[seq&s.mask]
		copy(nb[pos:], s.buf[r.off:r.off+r.n])
		r.off = uint32(pos)
		pos += int(r.n)
	}
	s.pool.putBytes(s.buf)
	s.buf, s.bhead, s.btail, s.wrapped = nb, 0, pos, false
}

// grownRecords is the length growRecords gives the record ring.
func (s *Sender) grownRecords() int {
	if len(s.recs) == 0 {
		return min(initialRecords, ceilPow2(s.cfg.MaxMessages))
	}
	return 2 * len(s.recs)
}

// growRecords doubles the record ring (or allocates the first one).
func (s *Sender) growRecords() { s.resizeRecords(s.grownRecords()) }

// resizeRecords moves the record ring to one of n slots, a power of two that
// holds every retained record, each at its sequence number's new slot.
func (s *Sender) resizeRecords(n int) {
	var nr []record
	if n > 0 {
		nr = s.pool.getRecords(n)
	}
	nmask := uint64(max(n, 1) - 1)
	for seq := s.acked; seq != s.nextSeq; seq++ {
		nr[seq&nmask] = s.recs[seq&s.mask]
	}
	s.pool.putRecords(s.recs)
	s.recs, s.mask = nr, nmask
	s.slots = uint64(min(len(nr), s.cfg.MaxMessages))
}

// Message returns a retained message, Acked() <= seq < NextSeq(). The payload
// aliases the window's ring: it stays valid until [Sender.Ack] frees seq, and
// the caller must not modify it. For a seq that is not retained Message
// returns (0, nil); a retained empty payload is a non-nil empty slice.
func (s *Sender) Message(seq uint64) (ts int64, payload []byte) {
	if seq < s.acked || seq >= s.nextSeq {
		return 0, nil
	}
	r := &s.recs[seq&s.mask]
	if r.n == r.head {
		return r.ts, emptyPayload
	}
	return r.ts, s.buf[r.off+r.head : r.off+r.n : r.off+r.n]
}

// Stored returns a retained message as it is stored, its head (see
// [Sender.PushHead]) and payload together, or nil for a seq that is not
// retained. It aliases the ring as Message's payload does.
func (s *Sender) Stored(seq uint64) []byte {
	if seq < s.acked || seq >= s.nextSeq {
		return nil
	}
	r := &s.recs[seq&s.mask]
	return s.buf[r.off : r.off+r.n : r.off+r.n]
}

// StoredLen is the number of bytes the k retained messages from seq take
// as stored (heads and payloads), what [Sender.AppendStored] appends. It
// panics unless Acked() <= seq and seq+k <= NextSeq().
func (s *Sender) StoredLen(seq uint64, k int) int {
	s.checkRange(seq, k)
	return int(s.streamOffset(seq+uint64(k)) - s.streamOffset(seq))
}

// AppendStored appends the k retained messages from seq to dst as they are
// stored, heads and payloads, in order, and returns the extended slice: one
// copy, or two where the ring wraps. It panics unless Acked() <= seq and
// seq+k <= NextSeq().
func (s *Sender) AppendStored(dst []byte, seq uint64, k int) []byte {
	s.checkRange(seq, k)
	if k == 0 {
		return dst
	}
	last := seq + uint64(k) - 1
	if s.wrapped && seq < s.wrapSeq && last >= s.wrapSeq {
		// [seq, wrapSeq) lie at the back of the ring, the rest from its front.
		back := &s.recs[(s.wrapSeq-1)&s.mask]
		dst = append(dst, s.buf[s.recs[seq&s.mask].off:back.off+back.n]...)
		seq = s.wrapSeq
	}
	first, end := &s.recs[seq&s.mask], &s.recs[last&s.mask]
	return append(dst, s.buf[first.off:end.off+end.n]...)
}

func (s *Sender) checkRange(seq uint64, k int) {
	if seq < s.acked || seq > s.nextSeq || k < 0 || uint64(k) > s.nextSeq-seq {
		panic(fmt.Sprintf("window: %d messages from %d, outside the retained [%d, %d)", k, seq, s.acked, s.nextSeq))
	}
}

// MarkSent records that every message below through has been written:
// the transmit cursor moves to through. A through at or below NextToSend() is
// a no-op; a through beyond NextSeq() returns [ErrOutOfRange] and moves
// nothing.
func (s *Sender) MarkSent(through uint64) error {
	if through <= s.nextToSend {
		return nil
	}
	if through > s.nextSeq {
		return ErrOutOfRange
	}
	off := s.streamOffset(through)
	s.sinceBytes += int(off - s.sentOff)
	s.sinceMsgs += int(through - s.nextToSend)
	s.nextToSend, s.sentOff = through, off
	s.sentHigh = max(s.sentHigh, through)
	return nil
}

// Ack frees every message below next and returns how many it freed. An ack at
// or below Acked() frees nothing (an old or duplicate ack). An ack beyond
// SentHigh() acknowledges messages never sent: it frees nothing and returns
// [ErrAckBeyondSent]. If next is beyond the transmit cursor (a late ack after
// a [Sender.Rewind]) the cursor moves up to next.
func (s *Sender) Ack(next uint64) (freed int, err error) {
	if next <= s.acked {
		return 0, nil
	}
	if next > s.sentHigh {
		return 0, ErrAckBeyondSent
	}
	freed = int(next - s.acked)
	s.peakBytes = max(s.peakBytes, s.payBytes)
	s.peakMsgs = max(s.peakMsgs, int(s.nextSeq-s.acked))
	s.payBytes -= int(s.streamOffset(next) - s.streamOffset(s.acked))
	if next > s.nextToSend {
		s.nextToSend, s.sentOff = next, s.streamOffset(next)
	}
	s.acked = next
	if s.acked == s.nextSeq {
		s.bhead, s.btail, s.wrapped = 0, 0, false
		s.maybeShrink()
		return freed, nil
	}
	if s.wrapped && s.acked >= s.wrapSeq {
		s.wrapped = false // the oldest payload is now in the front part
	}
	s.bhead = int(s.recs[s.acked&s.mask].off)
	return freed, nil
}

// shrinkEvery is how many acks that empty the window pass between looks at
// whether its rings are larger than the channel has needed lately.
const shrinkEvery = 64

// maybeShrink gives back ring memory a channel no longer uses: rings grow to
// a burst's size and would otherwise keep it, so ten thousand channels that
// each once saw a burst would hold ten thousand bursts' worth of memory. It
// runs only when the window is empty, every shrinkEvery times, and shrinks a
// ring to twice the peak seen since the last look when that peak used less
// than a quarter of it.
func (s *Sender) maybeShrink() {
	if s.empties++; s.empties < shrinkEvery {
		return
	}
	s.shrinkFor(s.peakBytes, s.peakMsgs)
	s.empties, s.peakBytes, s.peakMsgs = 0, 0, 0
}

// shrinkFor re-packs each ring that is at least four times larger than
// twice what it must hold (bytes of payload, msgs records) into one that
// size; bytes and msgs are at least what the window retains.
func (s *Sender) shrinkFor(bytes, msgs int) {
	if want := max(initialBytes, ceilPow2(2*bytes)); want*4 <= len(s.buf) {
		s.repackBytes(want)
	}
	if want := max(initialRecords, ceilPow2(2*msgs)); want*4 <= len(s.recs) {
		s.resizeRecords(want)
	}
}

// Trim gives back ring memory beyond what the retained messages need: an
// empty window frees both rings (the next Push allocates small ones again),
// and a ring at least four times larger than twice what it retains is
// re-packed into one that size. It returns the bytes of [Sender.Footprint]
// it freed. A caller bounding the memory of many windows trims them when
// memory is short; on its own a window shrinks only when it empties (every
// 64th time, to twice the most it retained since the last look).
func (s *Sender) Trim() (freed int) {
	before := s.Footprint()
	msgs := int(s.nextSeq - s.acked)
	if msgs == 0 {
		s.repackBytes(0)
		s.resizeRecords(0)
		s.empties, s.peakBytes, s.peakMsgs = 0, 0, 0
		return before
	}
	s.shrinkFor(s.payBytes, msgs)
	return before - s.Footprint()
}

// Rewind moves the transmit cursor back to seq so that the messages from seq
// on are sent again (go-back-N). It returns [ErrOutOfRange] and moves nothing
// unless Acked() <= seq <= NextToSend(). It returns the number of messages
// that will be sent again.
func (s *Sender) Rewind(seq uint64) (resend int, err error) {
	if seq < s.acked || seq > s.nextToSend {
		return 0, ErrOutOfRange
	}
	resend = int(s.nextToSend - seq)
	s.nextToSend, s.sentOff = seq, s.streamOffset(seq)
	return resend, nil
}

// RequestDue reports whether Config.AckRequestShare of the window (in
// messages or bytes) has been sent since the last [Sender.MarkRequested].
// Re-sent messages count too.
func (s *Sender) RequestDue() bool {
	return s.sinceMsgs >= s.dueMsgs || s.sinceBytes >= s.dueBytes
}

// MarkRequested records that an AckRequest covering everything sent so far has
// just been sent: the count behind [Sender.RequestDue] starts again.
func (s *Sender) MarkRequested() { s.sinceMsgs, s.sinceBytes = 0, 0 }

// streamOffset is the number of payload bytes pushed before seq,
// Acked() <= seq <= NextSeq().
func (s *Sender) streamOffset(seq uint64) uint64 {
	if seq == s.nextSeq {
		return s.pushed
	}
	r := &s.recs[seq&s.mask]
	return r.end - uint64(r.n)
}

// emptyPayload is what Message returns for a retained empty payload, so that
// it differs from the nil of "not retained".
var emptyPayload = []byte{}

func ceilPow2(n int) int {
	p := 1
	for p < n {
		p <<= 1
	}
	return p
}
