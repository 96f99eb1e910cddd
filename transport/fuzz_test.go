package transport

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/batch"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/wire"
)

// fuzzPingValue is the PING the fuzz peer sends after its input, to learn
// that the node has read all of it.
const fuzzPingValue = 0x5ee0_f022

// acceptedSeeds are frame streams an honest dialer sends after its
// preface: OPENs, DATA (plain and compressed), ACKREQUESTs, CLOSEs and
// PINGs of two channels, plus the same with duplicated and re-opened runs.
func acceptedSeeds() [][]byte {
	src, dst := taskid.ID{Processor: 1}, taskid.ID{Processor: 2, Index: 3}
	open := func(num uint32, epoch, first uint64) []byte {
		return wire.AppendOpen(nil, wire.Open{Channel: num, Source: src, Target: dst, Epoch: epoch, FirstSeq: first})
	}
	data := func(flags uint8, num uint32, first uint64, payloads ...string) []byte {
		b, start := wire.BeginFrame(nil, wire.FrameData, flags)
		b = wire.AppendRunHeader(b, wire.RunHeader{Channel: num, FirstSeq: first, Count: len(payloads), BaseTs: 100})
		ts := int64(100)
		for i, p := range payloads {
			b = wire.AppendMessage(b, ts, ts+int64(i), []byte(p))
			ts += int64(i)
		}
		return wire.FinishFrame(b, start)
	}
	compressed := func(num uint32, first uint64, n int) []byte {
		b, start := wire.BeginFrame(nil, wire.FrameData, 0)
		b = wire.AppendRunHeader(b, wire.RunHeader{Channel: num, FirstSeq: first, Count: n, BaseTs: 7})
		for range n {
			b = wire.AppendMessage(b, 7, 7, bytes.Repeat([]byte("abcd"), 64))
		}
		b = wire.FinishFrame(b, start)
		body, ok := batch.NewCompressor(64).Compress(nil, b[wire.HeaderLen:])
		if !ok {
			panic("the seed did not compress")
		}
		return wire.AppendFrame(nil, wire.FrameData, wire.DataCompressed, body)
	}
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	ackReq := wire.AppendAckRequest(nil, wire.AckRequest{Channel: 0, Epoch: 1, Seq: 3})
	return [][]byte{
		nil,
		open(0, 1, 0),
		cat(open(0, 1, 0), data(0, 0, 0, "a", "bc", ""), ackReq),
		cat(open(0, 1, 0), data(0, 0, 0, "a", "bc"), data(0, 0, 1, "bc", "d"), data(0, 0, 5, "gap")),
		cat(open(0, 1, 0), compressed(0, 0, 40), ackReq),
		cat(open(0, 1, 10), open(1, 2, 0), data(0, 1, 0, "new epoch"), data(0, 0, 10, "old epoch")),
		cat(open(0, 1, 0), data(0, 0, 0, "x"), wire.AppendClose(nil, wire.Close{Channel: 0}), open(0, 1, 1), data(0, 0, 1, "y")),
		cat(wire.AppendPing(nil, 9, wire.PingClock), wire.AppendPing(nil, 10, 0)),
		cat(open(0, 1, 0), wire.AppendGoAway(nil, wire.GoAway{Code: wire.GoAwayNormal, Message: "bye"})),
		cat(open(0, 1, 0), data(0, 3, 0, "no such channel")),
		cat(open(0, 1, 0), wire.AppendAck(nil, wire.Ack{Channel: 0, Epoch: 1})),
	}
}

// FuzzAcceptedConn plays a dialing peer that completes the handshake
// honestly and then sends arbitrary bytes, split at an arbitrary point, to
// an accepting node over an in-memory pipe. Whatever it sends: the node does
// not panic; everything it writes back is its preface and well-formed
// frames an accepting side may send (ACK, PING, PONG, GOAWAY; a GOAWAY
// last); when the input is whole frames the node either answers a PING
// sent after them or closes the connection with a GOAWAY; a refusal is a
// PROTOCOL_ERROR or LIMIT unless the peer went away; and each channel's
// handler gets consecutive sequence numbers, each at most once.
func FuzzAcceptedConn(f *testing.F) {
	for _, s := range acceptedSeeds() {
		f.Add(s, uint16(len(s)/2))
	}
	f.Fuzz(func(t *testing.T, in []byte, cut uint16) {
		const maxFrame = 64 << 10
		// The fuzzing engine has no per-input deadline: a node that hangs
		// would stall it silently. Crash instead, with every stack.
		watchdog := time.AfterFunc(time.Minute, func() {
			buf := make([]byte, 4<<20)
			panic(fmt.Sprintf("FuzzAcceptedConn: an input took over a minute (cut %d, %x)\n%s", cut, in, buf[:runtime.Stack(buf, true)]))
		})
		defer watchdog.Stop()
		n, err := NewNode(WithBackend(BackendNet), WithMaxFrame(maxFrame), WithMaxBatch(32<<10), WithCompression(true),
			WithMaxChannels(16), WithInboundBudget(1<<20), WithPingInterval(time.Hour), WithLogger(discardLogger()))
		if err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		next := map[taskid.Channel]uint64{}
		var fault error
		n.HandleAll(func(taskid.ID) Handler {
			return func(ch taskid.Channel, first uint64, msgs []Message) {
				mu.Lock()
				defer mu.Unlock()
				if want, ok := next[ch]; ok && first != want && fault == nil {
					fault = fmt.Errorf("channel %v: a run from %d after one that ended at %d", ch, first, want)
				}
				if len(msgs) == 0 && fault == nil {
					fault = fmt.Errorf("channel %v: an empty run", ch)
				}
				next[ch] = first + uint64(len(msgs))
			}
		})

		server, client := net.Pipe()
		out := newPipeReader(client)
		go n.accept(server)
		frames := wire.AppendPreface(nil, wire.Preface{Version: wire.Version, Flags: wire.FlagCompression, NodeID: 42})
		whole, peerGoAway := wholeFrames(in, maxFrame)
		k := int(cut) % (len(in) + 1)
		ok := write(client, append(frames, in[:k]...)) && write(client, in[k:])
		if ok && whole && !peerGoAway {
			ok = write(client, wire.AppendPing(nil, fuzzPingValue, 0))
		}
		var ponged bool
		if ok && whole && !peerGoAway {
			// The node reads everything; it answers the PING unless it
			// closed the connection.
			ponged = out.waitPong(10 * time.Second)
		}
		// The node writes its preface before it decodes anything, but its
		// reader reads on while that write waits for this end, which a
		// pipe makes it do: the input may all be read, and this end
		// closed, before the preface was taken. A socket would hold it;
		// take it before closing.
		out.waitFor(10*time.Second, func(b []byte) bool { return len(b) >= wire.PrefaceLen })
		client.Close()
		n.Abort()
		got := out.done()

		if err := checkAccepterOutput(got, whole && !peerGoAway, ponged); err != nil {
			t.Fatalf("%v\nnode wrote %x", err, got)
		}
		mu.Lock()
		defer mu.Unlock()
		if fault != nil {
			t.Fatal(fault)
		}
	})
}

// wholeFrames says whether in is a sequence of whole frames (each one
// DecodeFrame takes, or one it refuses, which ends the connection), and
// whether one of them is a GOAWAY, after which the node closes without one
// of its own.
func wholeFrames(in []byte, maxFrame int) (whole, goaway bool) {
	for len(in) > 0 {
		f, n, err := wire.DecodeFrame(in, maxFrame)
		if errors.Is(err, wire.ErrNeedMore) {
			return false, goaway
		}
		if err != nil {
			return true, goaway
		}
		if f.Type == wire.FrameGoAway {
			goaway = true
		}
		in = in[n:]
	}
	return true, goaway
}

// write writes b, reporting false once the node has closed the pipe.
func write(c net.Conn, b []byte) bool {
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_, err := c.Write(b)
	return err == nil
}

// pipeReader drains what the node writes, so that the node's writes on the
// synchronous pipe never block.
type pipeReader struct {
	mu     sync.Mutex
	buf    []byte
	more   chan struct{} // signalled after each read
	closed chan struct{}
}

func newPipeReader(c net.Conn) *pipeReader {
	r := &pipeReader{more: make(chan struct{}, 1), closed: make(chan struct{})}
	go func() {
		defer close(r.closed)
		b := make([]byte, 4096)
		for {
			n, err := c.Read(b)
			r.mu.Lock()
			r.buf = append(r.buf, b[:n]...)
			r.mu.Unlock()
			select {
			case r.more <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
		}
	}()
	return r
}

// waitPong waits for the PONG of fuzzPingValue, or for the node to close
// the pipe.
func (r *pipeReader) waitPong(d time.Duration) bool {
	deadline := time.After(d)
	for {
		r.mu.Lock()
		b := bytes.Clone(r.buf)
		r.mu.Unlock()
		if hasPong(b) {
			return true
		}
		select {
		case <-r.more:
		case <-r.closed:
			r.mu.Lock()
			b := bytes.Clone(r.buf)
			r.mu.Unlock()
			return hasPong(b)
		case <-deadline:
			return false
		}
	}
}

func (r *pipeReader) done() []byte {
	<-r.closed
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf
}

func hasPong(b []byte) bool {
	if len(b) < wire.PrefaceLen {
		return false
	}
	b = b[wire.PrefaceLen:]
	for {
		f, n, err := wire.DecodeFrame(b, 0)
		if err != nil {
			return false
		}
		if f.Type == wire.FramePong && len(f.Body) >= 8 && binary.BigEndian.Uint64(f.Body) == fuzzPingValue {
			return true
		}
		b = b[n:]
	}
}

// checkAccepterOutput checks what an accepting node wrote to the dialing
// peer (checkNodeOutput): besides PING, PONG and GOAWAY, only ACKs.
func checkAccepterOutput(b []byte, needAnswer, ponged bool) error {
	return checkNodeOutput(b, needAnswer, ponged, "an accepting", func(f wire.Frame) (bool, error) {
		if f.Type != wire.FrameAck {
			return false, nil
		}
		_, err := wire.ParseAck(f.Body)
		return true, err
	})
}

// checkNodeOutput checks what a node wrote to its peer: its preface, then
// well-formed frames, a GOAWAY only last, of a code that says the peer
// broke the protocol or a limit, or that the node shut down. parse checks a
// frame of a kind only side's nodes send and reports whether it is one.
// needAnswer says that the peer sent whole frames and a PING, and ponged
// that the PONG came back: if it did not, the node must have closed the
// connection with a GOAWAY saying why.
func checkNodeOutput(b []byte, needAnswer, ponged bool, side string, parse func(wire.Frame) (bool, error)) error {
	if len(b) < wire.PrefaceLen {
		return fmt.Errorf("the node wrote %d bytes, not even its preface", len(b))
	}
	if _, _, err := wire.DecodePreface(b); err != nil {
		return fmt.Errorf("the node's preface: %v", err)
	}
	b = b[wire.PrefaceLen:]
	var goaway *wire.GoAway
	for len(b) > 0 {
		f, n, err := wire.DecodeFrame(b, 0)
		if err != nil {
			return fmt.Errorf("the node wrote a frame that does not decode: %v", err)
		}
		if goaway != nil {
			return fmt.Errorf("a %v frame after GOAWAY %v", f.Type, goaway.Code)
		}
		switch f.Type {
		case wire.FramePing:
			_, err = wire.ParsePing(f.Body)
		case wire.FramePong:
			_, err = wire.ParsePong(f.Flags, f.Body)
		case wire.FrameGoAway:
			var g wire.GoAway
			g, err = wire.ParseGoAway(f.Body)
			goaway = &g
		default:
			var ok bool
			if ok, err = parse(f); !ok {
				err = fmt.Errorf("%s node may not send it", side)
			}
		}
		if err != nil {
			return fmt.Errorf("the node's %v frame: %v", f.Type, err)
		}
		b = b[n:]
	}
	if goaway != nil && goaway.Code != wire.GoAwayProtocolError && goaway.Code != wire.GoAwayLimit && goaway.Code != wire.GoAwayShutdown {
		return fmt.Errorf("GOAWAY %v (%q)", goaway.Code, goaway.Message)
	}
	if needAnswer && !ponged && (goaway == nil || goaway.Code == wire.GoAwayShutdown) {
		return fmt.Errorf("the node neither answered a PING after whole frames nor refused them")
	}
	return nil
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }
