package bench

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"testing/iotest"
	"time"
)

// packed returns the stream a PackedWriter of size-byte messages writes for
// the sequence numbers seqs, encoded here by hand.
func packed(size int, seqs ...uint64) []byte {
	var b []byte
	for _, s := range seqs {
		b = binary.BigEndian.AppendUint32(b, uint32(size))
		msg := make([]byte, size)
		binary.LittleEndian.PutUint64(msg[8:], s)
		for i := StampLen; i < size; i++ {
			msg[i] = byte('a' + i%26)
		}
		b = append(b, msg...)
	}
	return b
}

// changed returns b with byte i flipped.
func changed(b []byte, i int) []byte {
	b[i] ^= 1
	return b
}

// Filled holds a payload against the filler as defined, not as a writer
// makes it: each byte after the stamp, and nothing beyond what it can check.
func TestFilledChecksEveryByteAfterTheStamp(t *testing.T) {
	msg := make([]byte, 100)
	for i := StampLen; i < len(msg); i++ {
		msg[i] = "abcdefghijklmnopqrstuvwxyz"[i%26]
	}
	Stamp(msg, 7, 9) // the stamp is not the filler's
	if !Filled(msg) || !Filled(msg[:StampLen]) {
		t.Fatal("a stamped payload with the filler is not Filled")
	}
	for i := StampLen; i < len(msg); i++ {
		if Filled(changed(msg, i)) {
			t.Errorf("byte %d changed, still Filled", i)
		}
		changed(msg, i)
	}
	long := make([]byte, fillerLen+1)
	for i := StampLen; i < len(long); i++ {
		long[i] = byte('a' + i%26)
	}
	if Filled(msg[:StampLen-1]) || Filled(long) || !Filled(long[:fillerLen]) {
		t.Error("a payload shorter than a stamp, or longer than the filler, is Filled; or the longest is not")
	}
}

func TestPackedRoundTrip(t *testing.T) {
	const n, size = 3000, 100 // several 64 KiB buffers
	var buf bytes.Buffer
	w, err := NewPackedWriter(&buf, size)
	if err != nil {
		t.Fatal(err)
	}
	writes := 0
	counting := writerFunc(func(p []byte) (int, error) { writes++; return buf.Write(p) })
	w.w = counting
	for range n {
		if err := w.Add(42); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
	if buf.Len() != n*(4+size) {
		t.Fatalf("wrote %d bytes, want %d", buf.Len(), n*(4+size))
	}
	if want := (n*(4+size) + packedBuffer - 1) / packedBuffer; writes > want+1 {
		t.Errorf("%d writes for %d bytes: not batched", writes, buf.Len())
	}
	// Read back a byte at a time too: messages split across reads.
	for _, r := range []io.Reader{bytes.NewReader(buf.Bytes()), iotest.OneByteReader(bytes.NewReader(buf.Bytes()))} {
		d, err := ReadPacked(r, size)
		if err != nil {
			t.Fatal(err)
		}
		if !d.ExactlyOnce(n) || d.LastNS == 0 {
			t.Errorf("read %+v, want %d exactly once", d, n)
		}
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

func TestReadPackedFindsBadStreams(t *testing.T) {
	for _, c := range []struct {
		name   string
		stream []byte
		want   Delivery
		err    error
	}{
		{"in order", packed(16, 0, 1, 2), Delivery{Delivered: 3}, nil},
		{"a repeat", packed(16, 0, 1, 1, 2), Delivery{Delivered: 3, Duplicates: 1}, nil},
		{"a gap", packed(16, 0, 3, 4), Delivery{Delivered: 3, Missing: 2}, nil},
		{"a wrong length", append(packed(16, 0), packed(17, 1)...), Delivery{Delivered: 1}, ErrBadMessage},
		{"a cut message", packed(16, 0, 1)[:30], Delivery{Delivered: 1}, ErrBadMessage},
		{"a cut length", packed(16, 0, 1)[:22], Delivery{Delivered: 1}, ErrBadMessage},
		{"nothing", nil, Delivery{}, nil},
		{"a changed byte after the stamp", changed(packed(20, 0, 1), 4+20+4+StampLen+1), Delivery{Delivered: 1}, ErrBadMessage},
	} {
		size := 16
		if c.name == "a changed byte after the stamp" {
			size = 20
		}
		d, err := ReadPacked(bytes.NewReader(c.stream), size)
		if !errors.Is(err, c.err) || (err == nil) != (c.err == nil) {
			t.Errorf("%s: error %v, want %v", c.name, err, c.err)
		}
		d.LastNS, d.next = 0, 0
		if d != c.want {
			t.Errorf("%s: %+v, want %+v", c.name, d, c.want)
		}
	}
	if d, _ := ReadPacked(bytes.NewReader(packed(16, 0, 1, 1, 2)), 16); d.ExactlyOnce(3) {
		t.Error("a stream with a repeat counts as exactly once")
	}
}

func TestBaselinesRefuseBadSizes(t *testing.T) {
	for _, size := range []int{-1, 0, StampLen - 1, packedBuffer} {
		if _, err := NewPackedWriter(io.Discard, size); err == nil {
			t.Errorf("NewPackedWriter(%d) accepted", size)
		}
		if _, err := ReadPacked(bytes.NewReader(nil), size); err == nil {
			t.Errorf("ReadPacked(%d) accepted", size)
		}
		if _, err := ReadStamped(bytes.NewReader(nil), size, NewRecorder()); err == nil {
			t.Errorf("ReadStamped(%d) accepted", size)
		}
		if err := Echo(&bytes.Buffer{}, size); err == nil {
			t.Errorf("Echo(%d) accepted", size)
		}
		if _, err := NewPinger(&bytes.Buffer{}, size); err == nil {
			t.Errorf("NewPinger(%d) accepted", size)
		}
	}
}

func TestReadStamped(t *testing.T) {
	var stream []byte
	now := Now()
	for i, lateNS := range []int64{1_000, 2_000_000, 3_000_000} {
		msg := make([]byte, 20)
		Stamp(msg, now-lateNS, uint64(i))
		stream = append(stream, msg...)
	}
	rec := NewRecorder()
	d, err := ReadStamped(bytes.NewReader(stream), 20, rec)
	if err != nil || !d.ExactlyOnce(3) {
		t.Fatalf("read %+v, %v", d, err)
	}
	// Each latency is at least how late it was stamped, and the reader's
	// clock moved on by less than a second.
	l := rec.Latency()
	if rec.Count() != 3 || l.Max < 3000 || l.Max > 1_003_000 || l.P50 < 2000 {
		t.Errorf("recorded %d latencies, %+v µs", rec.Count(), l)
	}
	if _, err := ReadStamped(bytes.NewReader(stream[:50]), 20, NewRecorder()); !errors.Is(err, ErrBadMessage) {
		t.Errorf("a cut stream: %v, want ErrBadMessage", err)
	}
}

// The ping-pong, plain and with a hand-off at each end: every ping comes
// back, the echo ends cleanly at EOF, and once the echo's end is closed
// Ping fails (with a hand-off, the pinger's reading goroutine has ended).
func TestPingPongOverTCP(t *testing.T) {
	for _, c := range []struct {
		name      string
		echo      func(io.ReadWriter, int) error
		newPinger func(io.ReadWriter, int) (*Pinger, error)
	}{
		{"plain", Echo, NewPinger},
		{"hand-offs", EchoHandOff, NewHandOffPinger},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl, s := tcpPair(t)
			echoed := make(chan error, 1)
			go func() { echoed <- c.echo(s, 32) }()
			p, err := c.newPinger(cl, 32)
			if err != nil {
				t.Fatal(err)
			}
			for range 1000 {
				if rtt, err := p.Ping(); err != nil || rtt <= 0 {
					t.Fatalf("ping: %v, %v", rtt, err)
				}
			}
			cl.CloseWrite()
			if err := <-echoed; err != nil {
				t.Errorf("echo: %v", err)
			}
			s.Close()
			_, err1 := p.Ping()
			_, err2 := p.Ping()
			if err1 == nil || err2 == nil {
				t.Errorf("pings after the echo closed: %v, then %v; want errors", err1, err2)
			}
		})
	}
}

// A hand-off Pinger whose reading goroutine met the end of the stream
// returns that to every Ping from then on, without writing.
func TestHandOffPingerKeepsItsReadError(t *testing.T) {
	var wrote bytes.Buffer
	p, err := NewHandOffPinger(struct {
		io.Reader
		io.Writer
	}{bytes.NewReader(nil), &wrote}, 32)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if _, err := p.Ping(); err != io.EOF {
			t.Errorf("ping %d: %v, want io.EOF", i, err)
		}
	}
	if wrote.Len() != 32 {
		t.Errorf("wrote %d bytes, want one ping's 32", wrote.Len())
	}
}

// EchoHandOff writes back every message it read before EOF, in order, and
// reports a stream cut inside a message.
func TestEchoHandOffAnswersEveryMessage(t *testing.T) {
	in := packedStamps(24, 200)
	var out bytes.Buffer
	if err := EchoHandOff(struct {
		io.Reader
		io.Writer
	}{iotest.HalfReader(bytes.NewReader(in)), &out}, 24); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out.Bytes(), in) {
		t.Errorf("echoed %d bytes, not the %d read", out.Len(), len(in))
	}
	err := EchoHandOff(struct {
		io.Reader
		io.Writer
	}{bytes.NewReader(in[:30]), io.Discard}, 24)
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a stream cut inside a message: %v, want io.ErrUnexpectedEOF", err)
	}
	if err := EchoHandOff(struct {
		io.Reader
		io.Writer
	}{bytes.NewReader(in), failingWriter{}}, 24); !errors.Is(err, errWrite) {
		t.Errorf("a failing write: %v, want it returned", err)
	}
}

var errWrite = errors.New("write refused")

type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errWrite }

// packedStamps is n size-byte Stamped messages back to back.
func packedStamps(size, n int) []byte {
	var b []byte
	for i := range n {
		m := make([]byte, size)
		Stamp(m, int64(i), uint64(i))
		b = append(b, m...)
	}
	return b
}

// An echo that changes the message is caught.
func TestPingerCatchesABadEcho(t *testing.T) {
	c, s := tcpPair(t)
	go func() {
		buf := make([]byte, 32)
		for {
			if _, err := io.ReadFull(s, buf); err != nil {
				return
			}
			buf[20] ^= 1
			if _, err := s.Write(buf); err != nil {
				return
			}
		}
	}()
	p, _ := NewPinger(c, 32)
	if _, err := p.Ping(); !errors.Is(err, ErrBadEcho) {
		t.Errorf("a changed echo: %v, want ErrBadEcho", err)
	}
}

// FuzzReadPacked feeds ReadPacked arbitrary streams: it never panics,
// reports a malformed stream as ErrBadMessage, and never counts more
// messages than the stream could hold.
func FuzzReadPacked(f *testing.F) {
	f.Add(packed(16, 0, 1, 2), 16)
	f.Add(packed(16, 0, 5, 5, 1), 16)
	f.Add(packed(20, 0, 1)[:30], 20)
	f.Add([]byte{0xff, 0xff, 0xff, 0xff}, 16)
	f.Fuzz(func(t *testing.T, stream []byte, size int) {
		d, err := ReadPacked(iotest.HalfReader(bytes.NewReader(stream)), size)
		if err != nil && checkSize(size) == nil && !errors.Is(err, ErrBadMessage) {
			t.Fatalf("error %v is not ErrBadMessage", err)
		}
		if size > 0 && d.Delivered+d.Duplicates > int64(len(stream)/(4+size)) {
			t.Fatalf("%+v from %d bytes of %d-byte messages", d, len(stream), size)
		}
		// Acknowledging changes nothing of what is read, and each ack
		// counts the messages parsed so far, never backwards, never more
		// than there were.
		var acks bytes.Buffer
		da, erra := ReadPackedAcking(bytes.NewReader(stream), &acks, size, 1+len(stream)%7)
		if da.Delivered != d.Delivered || da.Duplicates != d.Duplicates || da.Missing != d.Missing || (erra == nil) != (err == nil) {
			t.Fatalf("acking read %+v (%v), plain read %+v (%v)", da, erra, d, err)
		}
		if acks.Len()%8 != 0 {
			t.Fatalf("%d bytes of acks", acks.Len())
		}
		prev := uint64(0)
		for b := acks.Bytes(); len(b) > 0; b = b[8:] {
			v := binary.BigEndian.Uint64(b)
			if v <= prev || int64(v) > d.Delivered+d.Duplicates {
				t.Fatalf("an ack of %d after %d, %d messages parsed", v, prev, d.Delivered+d.Duplicates)
			}
			prev = v
		}
	})
}

// ackWatch reads a packed stream for ReadPackedAcking and checks, at every
// read, that the writer never had more than window messages written beyond
// the last ack ReadPackedAcking sent (the acks go through it too).
type ackWatch struct {
	r           io.Reader
	w           io.Writer
	size        int
	window      int64
	read, acked int64 // bytes read, the last ack written
	worst       int64 // the most messages read beyond the last ack
	acks        int
	gate        func() // called before the first read
}

func (a *ackWatch) Read(p []byte) (int, error) {
	if a.gate != nil {
		a.gate()
		a.gate = nil
	}
	n, err := a.r.Read(p)
	a.read += int64(n)
	a.worst = max(a.worst, a.read/int64(4+a.size)-a.acked)
	return n, err
}

func (a *ackWatch) Write(p []byte) (int, error) {
	if len(p) == 8 {
		a.acked = int64(binary.BigEndian.Uint64(p))
		a.acks++
	}
	return a.w.Write(p)
}

func TestFlowWriterKeepsToItsWindow(t *testing.T) {
	const n, size, window, every = 20000, 100, 1500, 300 // a 64 KiB write is 630 messages
	c, s := tcpPair(t)
	f, err := NewFlowWriter(c, size, window)
	if err != nil {
		t.Fatal(err)
	}
	// The reader starts once the writer has filled the window and waits
	// for an ack: the socket's buffers hold the window's 156 KB.
	watch := &ackWatch{r: s, w: s, size: size, window: window, gate: func() {
		for deadline := time.Now().Add(10 * time.Second); f.Waits() == 0 && time.Now().Before(deadline); {
			time.Sleep(time.Millisecond)
		}
	}}
	type result struct {
		d   Delivery
		err error
	}
	done := make(chan result, 1)
	go func() {
		d, err := ReadPackedAcking(watch, watch, size, every)
		done <- result{d, err}
	}()
	for range n {
		if err := f.Add(7); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil || !r.d.ExactlyOnce(n) || f.Sent() != n {
		t.Fatalf("read %+v (%v) of %d sent", r.d, r.err, f.Sent())
	}
	// The flow control happened: the writer waited, the acks (one a read
	// that completed another `every` messages, counting all so far) covered
	// all but the last few, and no read found more than the window beyond
	// the last ack.
	if f.Waits() == 0 || watch.acks < n/packedBuffer*(4+size) || watch.acked <= n-every {
		t.Errorf("the writer waited %d times for %d acks, the last for %d messages", f.Waits(), watch.acks, watch.acked)
	}
	if watch.worst > window {
		t.Errorf("the reader saw %d messages beyond its last ack, window %d", watch.worst, window)
	}
}

func TestFlowWriterRefusesBadAcks(t *testing.T) {
	for _, tc := range []struct {
		name string
		ack  []byte
		want error
	}{
		{"beyond what was written", binary.BigEndian.AppendUint64(nil, 1<<40), ErrBadMessage},
		{"cut short", []byte{0, 0, 0}, io.ErrUnexpectedEOF},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, s := tcpPair(t)
			f, err := NewFlowWriter(c, 100, 1000)
			if err != nil {
				t.Fatal(err)
			}
			go io.Copy(io.Discard, s)
			if _, err := s.Write(tc.ack); err != nil {
				t.Fatal(err)
			}
			_ = s.CloseWrite()
			// Writes go on until the writer has seen the acks stop.
			for i := 0; ; i++ {
				err = f.Add(1)
				if err != nil || i > 50_000_000 {
					break
				}
			}
			if !errors.Is(err, tc.want) {
				t.Errorf("the writer's error: %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := ReadPackedAcking(bytes.NewReader(nil), io.Discard, 100, 0); err == nil {
		t.Error("ReadPackedAcking acknowledged every 0 messages")
	}
	if _, err := NewFlowWriter(&bytes.Buffer{}, 100, 0); err == nil {
		t.Error("NewFlowWriter took a window of 0 messages")
	}
}

// tcpPair is TCPPair for a test: both ends close when it ends.
func tcpPair(t *testing.T) (client, server *net.TCPConn) {
	t.Helper()
	c, s, err := TCPPair()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c, s
}

// smallReads reads at most max bytes at a time, as a reader that keeps up
// with a TCP stream gets it: a segment, or part of one, per read.
type smallReads struct {
	r   io.Reader
	max int
}

func (s smallReads) Read(p []byte) (int, error) { return s.r.Read(p[:min(len(p), s.max)]) }

// A window that holds a 64 KiB buffer but not also the messages a reader
// acknowledging every `every` leaves unacknowledged between two of its
// acks still lets the writer go on: what loadgen's tcp-flow case runs at
// 16-byte messages (3276 to a buffer, a window of 4096, an ack every 1024).
// The reader here reads at most 100 messages at a time, so its ack for the
// 15,360th message counts at most 15,460: when the writer has written five
// buffers (16,380 messages), 920 of them stay unacknowledged until the
// reader has 16,384, and a sixth buffer does not fit in the window beside
// them.
func TestFlowWriterGoesOnWhenTheReaderAcksLessThanItsBuffer(t *testing.T) {
	const size, window, every = 16, 4096, 1024
	const n = 10 * packedBuffer / (4 + size)
	c, s := tcpPair(t)
	f, err := NewFlowWriter(c, size, window)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		d   Delivery
		err error
	}
	read := make(chan result, 1)
	go func() {
		d, err := ReadPackedAcking(smallReads{s, 100 * (4 + size)}, s, size, every)
		read <- result{d, err}
	}()
	wrote := make(chan error, 1)
	go func() {
		for range n {
			if err := f.Add(7); err != nil {
				wrote <- err
				return
			}
		}
		if err := f.Flush(); err != nil {
			wrote <- err
			return
		}
		wrote <- c.CloseWrite()
	}()
	select {
	case err := <-wrote:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second): // only if it is stuck for good
		f.mu.Lock()
		written, acked := f.written, f.acked
		f.mu.Unlock()
		t.Fatalf("the writer waits for an ack that never comes: %d of %d messages added, %d written, %d acknowledged", f.Sent(), n, written, acked)
	}
	r := <-read
	if r.err != nil || !r.d.ExactlyOnce(n) {
		t.Fatalf("read %+v (%v) of %d sent", r.d, r.err, n)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.written-f.acked > window {
		t.Errorf("%d written, %d acknowledged: more than the window of %d unacknowledged", f.written, f.acked, window)
	}
}
