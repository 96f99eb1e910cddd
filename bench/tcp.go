package bench

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// The plain-TCP baselines: what one loopback TCP connection does with the
// same messages, measured in the same run as the system under test, so that
// its figures can be quoted as ratios. Three shapes, each split into a
// sending and a receiving half so that the halves can live in one process or
// in two:
//
//   - the throughput ceiling: a [PackedWriter] fills 64 KiB buffers with
//     length-prefixed messages and writes each with one call; [ReadPacked]
//     reads 64 KiB at a time and parses and checks every message; and the
//     same under a sliding window's flow control, a [FlowWriter] and
//     [ReadPackedAcking];
//   - fixed-rate latency: the sender writes each [Stamp]ed message with one
//     write (the best latency plain TCP offers) when a [FixedRate] driver
//     says it is due; [ReadStamped] reads what has arrived, up to 64 KiB at
//     a time, and records Now()-intended for each message;
//   - ping-pong: a [Pinger] writes one message and waits for [Echo] to send
//     it back; and the same with a hand-off between goroutines at each end
//     ([NewHandOffPinger], [EchoHandOff]), as a node that reads on one
//     goroutine and runs its handlers on others must make.
//
// Every message carries, in its first [StampLen] bytes, its intended send
// time (little-endian int64, [Now] nanoseconds) and its sequence number
// (little-endian uint64, from 0), the layout loadgen's transport payloads use
// too. Messages are at least StampLen bytes long.

// StampLen is the bytes at the start of a message that carry its intended
// send time and its sequence number.
const StampLen = 16

// packedBuffer is the write and read size of the throughput ceiling.
const packedBuffer = 64 << 10

// MaxSize is the largest message the baselines carry: one, with its length,
// fills a 64 KiB buffer.
const MaxSize = packedBuffer - 4

// ErrBadMessage is returned by the readers when a message is not what the
// writers write: a length other than the agreed size, or a truncated stream.
var ErrBadMessage = errors.New("bench: malformed baseline message")

// ErrBadEcho is returned by [Pinger.Ping] when the answer is not the message
// it sent.
var ErrBadEcho = errors.New("bench: the echo is not the message sent")

// Stamp writes intended and seq into the first [StampLen] bytes of msg.
func Stamp(msg []byte, intended int64, seq uint64) {
	binary.LittleEndian.PutUint64(msg, uint64(intended))
	binary.LittleEndian.PutUint64(msg[8:], seq)
}

// Stamped returns what [Stamp] wrote into msg.
func Stamped(msg []byte) (intended int64, seq uint64) {
	return int64(binary.LittleEndian.Uint64(msg)), binary.LittleEndian.Uint64(msg[8:])
}

// fillerLen is how long a payload [Filled] can check: loadgen's largest
// (a channel's default window).
const fillerLen = 1 << 20

// filler is what follows the stamp in every payload the baselines and
// loadgen send ('a' + i%26 at byte i), written out here from that
// definition rather than by the writers, so that a reader comparing with
// it checks them independently.
var filler = func() []byte {
	b := make([]byte, fillerLen)
	for i := StampLen; i < StampLen+26; i++ {
		b[i] = "abcdefghijklmnopqrstuvwxyz"[i%26]
	}
	// Doubling copies of whole 26-byte periods keep byte i at i%26: a
	// loop a byte would cost every program that imports the package a
	// millisecond or more at start.
	for n := StampLen + 26; n < len(b); n += n - StampLen {
		copy(b[n:], b[StampLen:n])
	}
	return b
}()

// Filled reports whether msg is a stamped payload as the baselines and
// loadgen send it: a stamp, then exactly their filler. A reader that
// checks it catches a byte changed on the way after any checksum of the
// transport's (in the receiving node, in a handler's buffer), which a
// sequence number alone would not.
func Filled(msg []byte) bool {
	return len(msg) >= StampLen && len(msg) <= fillerLen && bytes.Equal(msg[StampLen:], filler[StampLen:len(msg)])
}

// checkSize refuses message sizes the baselines cannot carry.
func checkSize(size int) error {
	if size < StampLen || size > MaxSize {
		return fmt.Errorf("bench: message size %d out of range: want %d to %d bytes", size, StampLen, MaxSize)
	}
	return nil
}

// Delivery is what a receiving half found: messages in order, repeated or
// missing by their sequence numbers, and when the last one arrived.
type Delivery struct {
	// Delivered counts messages received for the first time.
	Delivered int64 `json:"delivered"`
	// Duplicates counts messages whose sequence number was already seen.
	Duplicates int64 `json:"duplicates"`
	// Missing counts sequence numbers skipped.
	Missing int64 `json:"missing"`
	// LastNS is [Now] when the last message arrived (0 if none did).
	LastNS int64 `json:"last_ns"`
	next   uint64
}

// Observe checks the next message's sequence number: one already seen is
// a duplicate, for which Observe returns false; one beyond the next
// expected counts the numbers skipped as missing and is delivered. Any
// receiver of sequence-numbered messages can count with it; it is not safe
// for concurrent use.
func (d *Delivery) Observe(seq uint64) (first bool) {
	switch {
	case seq == d.next:
	case seq < d.next:
		d.Duplicates++
		return false
	default:
		d.Missing += int64(seq - d.next)
	}
	d.next = seq + 1
	d.Delivered++
	return true
}

// ExactlyOnce reports whether sent messages arrived, each exactly once.
func (d Delivery) ExactlyOnce(sent int64) bool {
	return d.Delivered == sent && d.Duplicates == 0 && d.Missing == 0
}

// TCPPair returns both ends of a fresh loopback TCP connection. Closing them
// is the caller's.
func TCPPair() (client, server *net.TCPConn, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	defer ln.Close()
	type accepted struct {
		c   net.Conn
		err error
	}
	ch := make(chan accepted, 1)
	go func() {
		c, err := ln.Accept()
		ch <- accepted{c, err}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return nil, nil, err
	}
	a := <-ch
	if a.err != nil {
		c.Close()
		return nil, nil, a.err
	}
	return c.(*net.TCPConn), a.c.(*net.TCPConn), nil
}

// PackedWriter is the sending half of the throughput ceiling: it appends
// length-prefixed (4 bytes, big-endian) messages of one size to a 64 KiB
// buffer and writes the buffer with one call when the next message would
// not fit. It is not safe for concurrent use.
type PackedWriter struct {
	w    io.Writer
	buf  []byte
	msg  []byte
	sent int64
}

// NewPackedWriter returns a PackedWriter of size-byte messages to w.
func NewPackedWriter(w io.Writer, size int) (*PackedWriter, error) {
	if err := checkSize(size); err != nil {
		return nil, err
	}
	msg := make([]byte, size)
	for i := StampLen; i < size; i++ {
		msg[i] = byte('a' + i%26)
	}
	return &PackedWriter{w: w, buf: make([]byte, 0, packedBuffer), msg: msg}, nil
}

// Add appends the next message, writing the buffer first if it is full.
// intended is carried in the message for whoever wants it.
func (p *PackedWriter) Add(intended int64) error {
	if len(p.buf)+4+len(p.msg) > cap(p.buf) {
		if err := p.Flush(); err != nil {
			return err
		}
	}
	Stamp(p.msg, intended, uint64(p.sent))
	p.buf = binary.BigEndian.AppendUint32(p.buf, uint32(len(p.msg)))
	p.buf = append(p.buf, p.msg...)
	p.sent++
	return nil
}

// Flush writes what the buffer holds.
func (p *PackedWriter) Flush() error {
	if len(p.buf) == 0 {
		return nil
	}
	_, err := p.w.Write(p.buf)
	p.buf = p.buf[:0]
	return err
}

// buffered returns how many messages the buffer holds.
func (p *PackedWriter) buffered() int64 { return int64(len(p.buf) / (4 + len(p.msg))) }

// flushFirst writes the first n messages of the buffer and keeps the rest.
func (p *PackedWriter) flushFirst(n int64) error {
	k := int(n) * (4 + len(p.msg))
	if k >= len(p.buf) {
		return p.Flush()
	}
	_, err := p.w.Write(p.buf[:k])
	p.buf = p.buf[:copy(p.buf, p.buf[k:])]
	return err
}

// Sent returns how many messages were added.
func (p *PackedWriter) Sent() int64 { return p.sent }

// ReadPacked is the receiving half of the throughput ceiling: it reads what
// a [PackedWriter] of size-byte messages wrote, 64 KiB at a time, until EOF,
// and checks every message's length and sequence number. It fails with
// [ErrBadMessage] on a wrong length or a stream that ends mid-message.
func ReadPacked(r io.Reader, size int) (Delivery, error) {
	return readPacked(r, size, nil, 0)
}

// ReadPackedAcking is ReadPacked that also acknowledges what it read, for
// a [FlowWriter]: each time another every messages have arrived it writes
// to w, after the read that brought them, the count of messages received
// so far (8 bytes, big-endian).
func ReadPackedAcking(r io.Reader, w io.Writer, size, every int) (Delivery, error) {
	if every < 1 {
		return Delivery{}, fmt.Errorf("bench: acknowledging every %d messages", every)
	}
	return readPacked(r, size, w, every)
}

// readPacked is ReadPacked, acknowledging to ack every every messages if
// ack is not nil.
func readPacked(r io.Reader, size int, ack io.Writer, every int) (Delivery, error) {
	var d Delivery
	if err := checkSize(size); err != nil {
		return d, err
	}
	var got, acked int64
	var a [8]byte
	buf := make([]byte, packedBuffer)
	have := 0
	for {
		n, rerr := r.Read(buf[have:])
		if n > 0 {
			d.LastNS = Now()
		}
		have += n
		used := 0
		for have-used >= 4 {
			l := int(binary.BigEndian.Uint32(buf[used:]))
			if l != size {
				return d, fmt.Errorf("%w: length %d, want %d", ErrBadMessage, l, size)
			}
			if have-used < 4+l {
				break
			}
			msg := buf[used+4 : used+4+l]
			_, seq := Stamped(msg)
			if !Filled(msg) {
				return d, fmt.Errorf("%w: message %d is not the writer's", ErrBadMessage, seq)
			}
			d.Observe(seq)
			got++
			used += 4 + l
		}
		have = copy(buf, buf[used:have])
		if ack != nil && got-acked >= int64(every) {
			acked = got - got%int64(every)
			binary.BigEndian.PutUint64(a[:], uint64(got))
			if _, err := ack.Write(a[:]); err != nil {
				return d, fmt.Errorf("bench: acknowledging: %w", err)
			}
		}
		switch {
		case rerr == io.EOF && have != 0:
			return d, fmt.Errorf("%w: the stream ends %d bytes into a message", ErrBadMessage, have)
		case rerr == io.EOF:
			return d, nil
		case rerr != nil:
			return d, rerr
		}
	}
}

// FlowWriter is a [PackedWriter] under the flow control of a sliding
// window, the sending half of the throughput ceiling with acks: at most
// window messages written and not yet acknowledged by the reader
// ([ReadPackedAcking]). A goroutine of its own reads the acks and wakes the
// writer when it waits, as a transport's event loop reads acks and wakes a
// producer waiting for credit. It measures what flow control alone costs
// a plain TCP writer. Once the acks stop (the stream ends or fails, or an
// ack counts what was never written) every write fails with the reason.
// Add and Flush are not safe for concurrent use.
type FlowWriter struct {
	pw      *PackedWriter
	window  int64
	mu      sync.Mutex
	cond    sync.Cond
	acked   int64 // messages the reader acknowledged
	written int64 // messages handed to the writer
	err     error // why the acks stopped
	waits   int64
}

// NewFlowWriter returns a FlowWriter of size-byte messages to rw, allowed
// window messages unacknowledged, whose acks it reads from rw until rw
// fails or ends.
func NewFlowWriter(rw io.ReadWriter, size, window int) (*FlowWriter, error) {
	if window < 1 {
		return nil, fmt.Errorf("bench: a window of %d messages", window)
	}
	pw, err := NewPackedWriter(rw, size)
	if err != nil {
		return nil, err
	}
	f := &FlowWriter{pw: pw, window: int64(window)}
	f.cond.L = &f.mu
	go f.readAcks(rw)
	return f, nil
}

// readAcks takes the reader's acks: cumulative counts, never backwards and
// never beyond what was written.
func (f *FlowWriter) readAcks(r io.Reader) {
	var a [8]byte
	for {
		_, err := io.ReadFull(r, a[:])
		f.mu.Lock()
		if err == nil {
			v := int64(binary.BigEndian.Uint64(a[:]))
			if v < f.acked || v > f.written {
				err = fmt.Errorf("%w: an ack of %d messages after %d, with %d written", ErrBadMessage, v, f.acked, f.written)
			} else {
				f.acked = v
			}
		}
		if err != nil && f.err == nil {
			f.err = fmt.Errorf("bench: reading acks: %w", err)
		}
		stop := f.err != nil
		f.cond.Broadcast()
		f.mu.Unlock()
		if stop {
			return
		}
	}
}

// Add appends the next message as PackedWriter.Add does, first writing the
// buffer if it is full, which waits until the window has room for it.
func (f *FlowWriter) Add(intended int64) error {
	if len(f.pw.buf)+4+len(f.pw.msg) > cap(f.pw.buf) {
		if err := f.Flush(); err != nil {
			return err
		}
	}
	return f.pw.Add(intended)
}

// Flush writes what the buffer holds, as much at a time as the window has
// room for: all of it once everything before it is acknowledged, even a
// buffer larger than the window. Writing only whole buffers would stall
// for good where the window holds a buffer but not also the messages the
// reader leaves unacknowledged between two acks: it acknowledges only each
// time another every messages have arrived, and none would.
func (f *FlowWriter) Flush() error {
	for len(f.pw.buf) > 0 {
		f.mu.Lock()
		for f.full() && f.err == nil {
			f.waits++
			f.cond.Wait()
		}
		err := f.err
		n := f.pw.buffered()
		if f.acked < f.written {
			n = min(n, f.acked+f.window-f.written)
		}
		if err == nil {
			f.written += n
		}
		f.mu.Unlock()
		if err != nil {
			return err
		}
		if err := f.pw.flushFirst(n); err != nil {
			return err
		}
	}
	return nil
}

// full reports whether the window has no room while earlier messages are
// unacknowledged. The caller holds f.mu.
func (f *FlowWriter) full() bool {
	return f.written-f.acked >= f.window && f.acked < f.written
}

// Sent returns how many messages were added.
func (f *FlowWriter) Sent() int64 { return f.pw.Sent() }

// Waits returns how many times a write waited for an ack.
func (f *FlowWriter) Waits() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waits
}

// ReadStamped is the receiving half of the fixed-rate baseline: it reads
// size-byte [Stamp]ed messages from r until EOF, checks their sequence
// numbers, and records each one's Now()-intended into rec. It reads up to
// 64 KiB at a time, so that a reader that fell behind catches up with one
// system call, as the transport's receiving loops do, rather than one per
// message.
func ReadStamped(r io.Reader, size int, rec *Recorder) (Delivery, error) {
	var d Delivery
	if err := checkSize(size); err != nil {
		return d, err
	}
	r = bufio.NewReaderSize(r, packedBuffer)
	buf := make([]byte, size)
	for {
		if _, err := io.ReadFull(r, buf); err != nil {
			switch {
			case err == io.EOF:
				return d, nil
			case errors.Is(err, io.ErrUnexpectedEOF):
				return d, fmt.Errorf("%w: the stream ends mid-message", ErrBadMessage)
			}
			return d, err
		}
		now := Now()
		intended, seq := Stamped(buf)
		rec.Record(now - intended)
		d.LastNS = now
		d.Observe(seq)
	}
}

// Echo is the far half of the ping-pong baseline: it reads size-byte
// messages from rw and writes each back, until EOF.
func Echo(rw io.ReadWriter, size int) error {
	if err := checkSize(size); err != nil {
		return err
	}
	buf := make([]byte, size)
	for {
		if _, err := io.ReadFull(rw, buf); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
		if _, err := rw.Write(buf); err != nil {
			return err
		}
	}
}

// EchoHandOff is [Echo] with a hand-off between goroutines: the calling
// goroutine reads each message and hands it to a second goroutine, which
// writes it back, as a node that reads on one goroutine and runs the task
// that answers on another does. It returns at EOF, once every message read
// has been written back, or at the first error of either goroutine.
func EchoHandOff(rw io.ReadWriter, size int) error {
	if err := checkSize(size); err != nil {
		return err
	}
	// Two buffers circulate: one being read into while the other is
	// written back.
	free, full := make(chan []byte, 2), make(chan []byte, 2)
	free <- make([]byte, size)
	free <- make([]byte, size)
	var werr error
	written := make(chan struct{})
	go func() {
		defer close(written)
		for buf := range full {
			if _, err := rw.Write(buf); err != nil {
				werr = err
				return
			}
			free <- buf
		}
	}()
	rerr := func() error {
		defer close(full)
		for {
			var buf []byte
			select {
			case buf = <-free:
			case <-written: // the writer failed
				return nil
			}
			if _, err := io.ReadFull(rw, buf); err != nil {
				if err == io.EOF {
					return nil
				}
				return err
			}
			full <- buf
		}
	}()
	<-written
	return errors.Join(rerr, werr)
}

// Pinger is the near half of the ping-pong baseline: each Ping writes one
// size-byte message and waits until [Echo] has sent it back. It is not safe
// for concurrent use.
type Pinger struct {
	rw         io.ReadWriter
	ping, pong []byte
	seq        uint64
	// With a hand-off (NewHandOffPinger), the reading goroutine sends each
	// pong on pongs and takes the buffer for the next back from free.
	pongs chan pongRead
	free  chan []byte
	err   error // the read that ended the reading goroutine
}

type pongRead struct {
	buf []byte
	err error
}

// NewPinger returns a Pinger of size-byte messages over rw.
func NewPinger(rw io.ReadWriter, size int) (*Pinger, error) {
	if err := checkSize(size); err != nil {
		return nil, err
	}
	return &Pinger{rw: rw, ping: make([]byte, size), pong: make([]byte, size)}, nil
}

// NewHandOffPinger returns a Pinger whose pongs a goroutine of its own
// reads and hands to Ping, which waits for them, as a node's handler hands
// what arrives to the goroutine waiting for it. That goroutine ends at the
// first failed read: close rw (or its reading half) when done.
func NewHandOffPinger(rw io.ReadWriter, size int) (*Pinger, error) {
	p, err := NewPinger(rw, size)
	if err != nil {
		return nil, err
	}
	// One pong is in flight at a time: one buffer, and room for the pong
	// or the error that ends the reading goroutine.
	p.pongs, p.free = make(chan pongRead, 1), make(chan []byte, 1)
	p.free <- p.pong
	go func() {
		for buf := range p.free {
			_, err := io.ReadFull(rw, buf)
			p.pongs <- pongRead{buf, err}
			if err != nil {
				return
			}
		}
	}()
	return p, nil
}

// Ping sends one message, waits for its echo, checks it, and returns the
// round trip.
func (p *Pinger) Ping() (time.Duration, error) {
	if p.err != nil {
		return 0, p.err
	}
	t0 := Now()
	Stamp(p.ping, t0, p.seq)
	p.seq++
	if _, err := p.rw.Write(p.ping); err != nil {
		return 0, err
	}
	pong := p.pong
	if p.pongs == nil {
		if _, err := io.ReadFull(p.rw, pong); err != nil {
			return 0, err
		}
	} else {
		r := <-p.pongs
		if r.err != nil { // the reading goroutine has ended
			p.err = r.err
			return 0, r.err
		}
		pong = r.buf
	}
	rtt := time.Duration(Now() - t0)
	same := string(pong) == string(p.ping)
	if p.pongs != nil {
		p.free <- pong // the reading goroutine's buffer for the next pong
	}
	if !same {
		return rtt, ErrBadEcho
	}
	return rtt, nil
}
