package transport

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"testing"
	"time"

	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/wire"
)

// fuzzDialedEpoch is the epoch of the dialing node's channels, so that the
// seeds' ACKs name it (or, to be stale, another).
const fuzzDialedEpoch = 7

// dialedShape is how FuzzDialedConn's node uses its connection, from the
// fuzzed shape byte: one or two channels (numbers 0 and 1, opened in that
// order once the connection is up), and how many messages each sends
// before the listener's input (0 to 7).
type dialedShape struct {
	channels int
	msgs     [2]int
}

func parseDialedShape(b uint8) dialedShape {
	s := dialedShape{channels: 1 + int(b&1), msgs: [2]int{int(b>>1) & 7, int(b>>4) & 7}}
	if s.channels == 1 {
		s.msgs[1] = 0
	}
	return s
}

// dialedSeedShape is the shape of the seeds: two channels, three messages
// on channel 0 and two on channel 1.
const dialedSeedShape = 1 | 3<<1 | 2<<4

// dialedSeeds are frame streams an accepting side sends after its preface
// to the seed shape's node: ACKs that open and acknowledge (valid ones,
// ones of a stale epoch, ones beyond what was sent, an Open ack that does
// not start where the OPEN did, one of a channel never opened), PINGs with
// and without a clock, PONGs (one that releases every retired number),
// GOAWAYs, and frames only a dialer may send (ACKREQUEST, DATA, OPEN).
func dialedSeeds() [][]byte {
	ack := func(num uint32, open bool, epoch, req, count, next uint64) []byte {
		a := wire.Ack{Channel: num, Epoch: epoch, ReqSeq: req, Count: count, Next: next}
		if open {
			a.Flags = wire.AckOpen
		}
		return wire.AppendAck(nil, a)
	}
	const e = fuzzDialedEpoch
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	opens := cat(ack(0, true, e, 0, 0, 0), ack(1, true, e, 0, 0, 0))
	data, start := wire.BeginFrame(nil, wire.FrameData, 0)
	data = wire.AppendRunHeader(data, wire.RunHeader{Channel: 0, FirstSeq: 0, Count: 1, BaseTs: 1})
	data = wire.AppendMessage(data, 1, 1, []byte("x"))
	data = wire.FinishFrame(data, start)
	return [][]byte{
		nil,
		opens,
		cat(opens, ack(0, false, e, 3, 3, 3), ack(1, false, e, 2, 2, 2)),
		cat(opens, ack(0, false, e, 3, 1, 1), ack(0, false, e, 3, 1, 1), ack(0, false, e, 3, 2, 3)),
		cat(ack(0, true, e, 0, 3, 3), ack(1, true, e, 0, 2, 2)),
		cat(opens, ack(0, false, e, 3, 9, 9)),                        // beyond what was sent
		cat(opens, ack(1, false, e, 7, 0, 1)),                        // a request never made
		cat(ack(0, true, e, 2, 0, 1), ack(1, true, e, 0, 0, 2)),      // an Open ack behind its OPEN
		cat(ack(0, true, e-1, 0, 0, 9), ack(1, false, e+1, 2, 2, 2)), // stale epochs
		cat(opens, ack(5, false, e, 0, 0, 0)),                        // a channel never opened
		cat(opens, ack(0, false, e, 3, 9, 9), wire.AppendPong(nil, wire.Pong{Value: 1 << 62}), ack(0, false, e, 3, 3, 3)),
		cat(wire.AppendPing(nil, 9, wire.PingClock), wire.AppendPing(nil, 10, 0)),
		cat(wire.AppendPong(nil, wire.Pong{Value: 3}), wire.AppendPong(nil, wire.Pong{Value: 4, Clock: 5, HasClock: true})),
		cat(opens, wire.AppendGoAway(nil, wire.GoAway{Code: wire.GoAwayNormal, Message: "bye"})),
		cat(opens, wire.AppendGoAway(nil, wire.GoAway{Code: wire.GoAwayShutdown})),
		cat(opens, wire.AppendAckRequest(nil, wire.AckRequest{Channel: 0, Epoch: e, Seq: 3})),
		cat(opens, data),
		cat(opens, wire.AppendOpen(nil, wire.Open{Channel: 0, Source: taskid.ID{Processor: 2}, Target: taskid.ID{Processor: 1}, Epoch: e})),
		ack(0, true, e, 0, 0, 0)[:wire.HeaderLen+2], // a frame cut short
	}
}

// FuzzDialedConn is FuzzAcceptedConn's other side: a node dials a listener
// played by the test, which answers with an honest preface; the node opens
// one or two channels and sends a few messages on them; the listener then
// sends arbitrary bytes, split at an arbitrary point. Whatever it sends:
// the node does not panic; everything it writes is its preface and
// well-formed frames a dialing side may send, a GOAWAY only last; when the
// input is whole frames the node either answers a PING sent after them or
// closes the connection with a GOAWAY PROTOCOL_ERROR or LIMIT; a channel
// that was sent an ACK, of its epoch, beyond what it sent is closed with a
// ChannelError matching ErrInvalidAck (when the connection read it all),
// and a channel is closed so only after some ACK that contradicts what it
// sent; Send and Flush return; and once the node is closed its goroutines
// are gone.
func FuzzDialedConn(f *testing.F) {
	for _, s := range dialedSeeds() {
		f.Add(s, uint16(len(s)/2), uint8(dialedSeedShape))
	}
	f.Add([]byte(nil), uint16(0), uint8(0))
	f.Fuzz(func(t *testing.T, in []byte, cut uint16, shapeByte uint8) {
		const maxFrame = 64 << 10
		watchdog := time.AfterFunc(time.Minute, func() {
			buf := make([]byte, 4<<20)
			panic(fmt.Sprintf("FuzzDialedConn: an input took over a minute (cut %d, shape %d, %x)\n%s", cut, shapeByte, in, buf[:runtime.Stack(buf, true)]))
		})
		defer watchdog.Stop()
		shape := parseDialedShape(shapeByte)
		baseline := runtime.NumGoroutine()

		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		// One connection: a node that loses it does not redial during the
		// input (Abort ends the wait).
		n, err := NewNode(WithBackend(BackendNet), WithEpoch(fuzzDialedEpoch), WithMaxFrame(maxFrame), WithMaxBatch(32<<10),
			WithMaxChannels(16), WithPingInterval(time.Hour), WithReconnectBackoff(time.Hour, time.Hour), WithLogger(discardLogger()))
		if err != nil {
			t.Fatal(err)
		}
		aborted := false
		defer func() {
			if !aborted {
				n.Abort()
			}
		}()
		p, err := n.Peer(ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		nc, err := ln.Accept()
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		out := newPipeReader(nc)
		if !write(nc, wire.AppendPreface(nil, wire.Preface{Version: wire.Version, NodeID: 99})) {
			t.Fatal("the node closed the connection before the listener's preface")
		}
		ctx := context.Background()
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		if err := p.WaitConnected(wctx); err != nil {
			t.Fatalf("the node did not complete the handshake: %v", err)
		}

		// Open the channels in order (numbers 0 and 1), send, and wait
		// until the DATA of every message is on the wire: then what each
		// channel sent (its SentHigh) is known, and so is which ACKs
		// contradict it.
		senders := make([]*Sender, shape.channels)
		for i := range senders {
			s, err := p.OpenSender(ctx, taskid.ID{Processor: 1, Index: uint32(i)}, taskid.ID{Processor: 2, Index: uint32(i)})
			if err != nil {
				t.Fatal(err)
			}
			senders[i] = s
			for k := range shape.msgs[i] {
				if err := s.Send(ctx, int64(k), fmt.Appendf(nil, "m%d.%d", i, k)); err != nil {
					t.Fatalf("Send before the input: %v", err)
				}
			}
		}
		if !out.waitFor(10*time.Second, func(b []byte) bool { return dialedSentAll(b, shape) }) {
			t.Fatalf("the node did not write the OPENs and DATA of %+v\nnode wrote %x", shape, out.snapshot())
		}
		flushed := make([]chan error, len(senders))
		for i, s := range senders {
			flushed[i] = make(chan error, 1)
			go func() { flushed[i] <- s.Flush(ctx) }()
		}

		whole, peerGoAway := wholeFrames(in, maxFrame)
		k := int(cut) % (len(in) + 1)
		ok := write(nc, in[:k]) && write(nc, in[k:])
		if ok && whole && !peerGoAway {
			ok = write(nc, wire.AppendPing(nil, fuzzPingValue, 0))
		}
		var ponged bool
		if ok && whole && !peerGoAway {
			ponged = out.waitPong(10 * time.Second)
		}
		if whole && !peerGoAway && !ponged {
			// The node refused the input and closes the connection: a
			// socket, unlike a pipe, holds its GOAWAY for the reader,
			// which closing this end now would throw away.
			out.waitFor(10*time.Second, func([]byte) bool { return false })
		}
		// What the channels say now, before the node is closed.
		tryErrs := make([]error, len(senders))
		for i, s := range senders {
			tryErrs[i] = s.TrySend(99, []byte("after"))
		}
		nc.Close()
		n.Abort()
		aborted = true
		ln.Close()
		got := out.done()

		if err := checkDialerOutput(got, whole && !peerGoAway, ponged); err != nil {
			t.Fatalf("%v\nnode wrote %x", err, got)
		}
		for i, s := range senders {
			contradicts, beyond := dialedAckVerdicts(in, maxFrame, uint32(i), uint64(shape.msgs[i]))
			err := tryErrs[i]
			invalid := errors.Is(err, ErrInvalidAck)
			var ce *ChannelError
			switch {
			case invalid && (!errors.As(err, &ce) || ce.Channel != s.Channel()):
				t.Errorf("channel %d: TrySend %v, want a ChannelError of %v", i, err, s.Channel())
			case invalid && !contradicts:
				t.Errorf("channel %d closed as %v, yet no ACK contradicted the %d messages it sent", i, err, shape.msgs[i])
			case !invalid && ponged && beyond:
				t.Errorf("channel %d: an ACK beyond the %d messages it sent was read, yet TrySend says %v, want ErrInvalidAck", i, shape.msgs[i], err)
			case err != nil && !invalid && !errors.Is(err, ErrNoCredit) && !errors.Is(err, ErrClosed):
				t.Errorf("channel %d: TrySend %v", i, err)
			}
			err = <-flushed[i] // the node is closed: Flush returns
			if err != nil && !errors.Is(err, ErrClosed) && !errors.Is(err, ErrInvalidAck) {
				t.Errorf("channel %d: Flush %v", i, err)
			}
			if err := s.Send(ctx, 100, []byte("closed")); err == nil {
				t.Errorf("channel %d: Send after the node closed returned nil", i)
			}
		}

		// Everything the node started has ended.
		deadline := time.Now().Add(5 * time.Second)
		for runtime.NumGoroutine() > baseline {
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<20)
				t.Fatalf("%d goroutines after the node closed, %d before it started\n%s", runtime.NumGoroutine(), baseline, buf[:runtime.Stack(buf, true)])
			}
			time.Sleep(time.Millisecond)
		}
	})
}

// dialedSentAll reports whether b, what the node wrote, holds its preface,
// the OPEN of each channel of shape and the DATA of all its messages.
func dialedSentAll(b []byte, shape dialedShape) bool {
	if len(b) < wire.PrefaceLen {
		return false
	}
	b = b[wire.PrefaceLen:]
	var opened [2]bool
	var high [2]uint64
	var r wire.DataReader
	for {
		f, n, err := wire.DecodeFrame(b, 0)
		if err != nil {
			break
		}
		b = b[n:]
		switch f.Type {
		case wire.FrameOpen:
			if o, err := wire.ParseOpen(f.Body); err == nil && o.Channel < 2 {
				opened[o.Channel] = true
			}
		case wire.FrameData:
			r.Reset(f.Body)
			for {
				h, err := r.NextRun()
				if err != nil {
					break
				}
				if h.Channel < 2 {
					high[h.Channel] = max(high[h.Channel], h.FirstSeq+uint64(h.Count))
				}
			}
		}
	}
	for i := range shape.channels {
		if !opened[i] || high[i] < uint64(shape.msgs[i]) {
			return false
		}
	}
	return true
}

// dialedAckVerdicts looks at the ACKs for channel number num in the whole
// frames of in, whose channel sent sent messages: contradicts says one of
// them, of its epoch, contradicts what was sent (beyond it, or an Open ack
// that ends before it starts), beyond that one acknowledges messages or
// answers a request beyond it, which the channel refuses whatever came
// before.
func dialedAckVerdicts(in []byte, maxFrame int, num uint32, sent uint64) (contradicts, beyond bool) {
	for len(in) > 0 {
		f, n, err := wire.DecodeFrame(in, maxFrame)
		if err != nil {
			return contradicts, beyond
		}
		in = in[n:]
		if f.Type != wire.FrameAck {
			continue
		}
		a, err := wire.ParseAck(f.Body)
		if err != nil {
			// The connection ends here: nothing after it is read.
			return contradicts, beyond
		}
		if a.Channel != num || a.Epoch != fuzzDialedEpoch {
			continue
		}
		if a.Next > sent || a.ReqSeq > sent {
			return true, true
		}
		if a.Flags&wire.AckOpen != 0 && a.Next < a.ReqSeq {
			contradicts = true
		}
	}
	return contradicts, beyond
}

// waitFor waits until cond holds of what the node wrote, or the node closed
// the connection, or d passed.
func (r *pipeReader) waitFor(d time.Duration, cond func([]byte) bool) bool {
	deadline := time.After(d)
	for {
		if cond(r.snapshot()) {
			return true
		}
		select {
		case <-r.more:
		case <-r.closed:
			return cond(r.snapshot())
		case <-deadline:
			return false
		}
	}
}

func (r *pipeReader) snapshot() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.buf)
}

// checkDialerOutput checks what a dialing node wrote to the accepting
// side (checkNodeOutput): besides PING, PONG and GOAWAY, OPEN, CLOSE,
// ACKREQUEST and uncompressed DATA, the listener not having offered
// compression.
func checkDialerOutput(b []byte, needAnswer, ponged bool) error {
	var r wire.DataReader
	return checkNodeOutput(b, needAnswer, ponged, "a dialing", func(f wire.Frame) (bool, error) {
		var err error
		switch f.Type {
		case wire.FrameOpen:
			_, err = wire.ParseOpen(f.Body)
		case wire.FrameClose:
			_, err = wire.ParseClose(f.Body)
		case wire.FrameAckRequest:
			_, err = wire.ParseAckRequest(f.Body)
		case wire.FrameData:
			if f.Flags&wire.DataCompressed != 0 {
				return true, fmt.Errorf("compressed, though the listener did not offer compression")
			}
			r.Reset(f.Body)
			for {
				if _, err = r.NextRun(); err != nil {
					break
				}
				for err == nil {
					_, err = r.NextMessage()
				}
				if err != io.EOF {
					break
				}
			}
			if err == io.EOF {
				err = nil
			}
		default:
			return false, nil
		}
		return true, err
	})
}
