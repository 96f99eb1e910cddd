package transport

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/wire"
)

// readFrame reads the next frame from r that is not a PING.
func readFrame(t *testing.T, r *bufio.Reader) wire.Frame {
	t.Helper()
	for {
		// PINGs come at any time (every connection pings when it opens
		// and then every ping interval); this peer does not answer them.
		if f := readAnyFrame(t, r); f.Type != wire.FramePing {
			return f
		}
	}
}

// acceptRawPeer accepts the next connection on ln as a hand-written peer
// (node id 99): it exchanges prefaces and returns the connection, closed
// when the test ends, and a reader past the node's preface.
// rawPeerListener returns a listener for a test to play a peer by hand
// (with acceptRawPeer), and a test node with a Peer for it, which dials it.
func rawPeerListener(t *testing.T) (net.Listener, *Node, *Peer) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	tx := testNode(t)
	p, err := tx.Peer(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	return ln, tx, p
}

func acceptRawPeer(t *testing.T, ln net.Listener) (net.Conn, *bufio.Reader) {
	t.Helper()
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nc.Close() })
	_ = nc.SetDeadline(time.Now().Add(20 * time.Second))
	if _, err := nc.Write(wire.AppendPreface(nil, wire.Preface{Version: wire.Version, NodeID: 99})); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(nc)
	if _, err := io.ReadFull(r, make([]byte, wire.PrefaceLen)); err != nil {
		t.Fatal(err)
	}
	return nc, r
}

// readAnyFrame reads the next frame from r.
func readAnyFrame(t *testing.T, r *bufio.Reader) wire.Frame {
	t.Helper()
	hdr := make([]byte, wire.HeaderLen)
	if _, err := io.ReadFull(r, hdr); err != nil {
		t.Fatalf("reading a frame header: %v", err)
	}
	h, err := wire.DecodeHeader(hdr, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := append(hdr, make([]byte, h.Length)...)
	if _, err := io.ReadFull(r, b[wire.HeaderLen:]); err != nil {
		t.Fatalf("reading a %v body: %v", h.Type, err)
	}
	f, _, err := wire.DecodeFrame(b, 0)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// A receiver whose ack contradicts what was sent (it acknowledges messages
// never sent) gets the channel closed: a CLOSE follows on the wire, and the
// sender's calls fail with a ChannelError matching ErrInvalidAck, while the
// connection stays up for other channels.
func TestAnAckOfMessagesNeverSentClosesTheChannel(t *testing.T) {
	ln, tx, p := rawPeerListener(t)
	ctx := ctxT(t, 20*time.Second)
	s, err := p.OpenSender(ctx, taskid.ID{Processor: 1}, taskid.ID{Processor: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.TrySend(0, []byte("one")); err != nil { // kept until the connection is up
		t.Fatal(err)
	}

	nc, r := acceptRawPeer(t, ln)
	f := readFrame(t, r)
	if f.Type != wire.FrameOpen {
		t.Fatalf("first frame %v, want OPEN", f.Type)
	}
	o, err := wire.ParseOpen(f.Body)
	if err != nil {
		t.Fatal(err)
	}
	if f := readFrame(t, r); f.Type != wire.FrameData {
		t.Fatalf("second frame %v, want the DATA of the message sent", f.Type)
	}
	// One message was sent, yet the receiver says it has five.
	ack := wire.AppendAck(nil, wire.Ack{Channel: o.Channel, Flags: wire.AckOpen, Epoch: o.Epoch, ReqSeq: o.FirstSeq, Next: 5})
	if _, err := nc.Write(ack); err != nil {
		t.Fatal(err)
	}
	for {
		f = readFrame(t, r)
		if f.Type == wire.FrameClose {
			break
		}
	}
	if cl, err := wire.ParseClose(f.Body); err != nil || cl.Channel != o.Channel {
		t.Fatalf("CLOSE %+v (%v), want one of channel %d", cl, err, o.Channel)
	}
	err = s.TrySend(0, []byte("x"))
	var ce *ChannelError
	if !errors.Is(err, ErrInvalidAck) || !errors.As(err, &ce) || ce.Channel != s.Channel() {
		t.Errorf("TrySend after the invalid ack: %v, want a ChannelError of %v matching ErrInvalidAck", err, s.Channel())
	}
	if err := s.Flush(context.Background()); !errors.Is(err, ErrInvalidAck) {
		t.Errorf("Flush after the invalid ack: %v, want ErrInvalidAck", err)
	}
	if got := tx.ChannelStats(); len(got) != 0 {
		t.Errorf("the closed channel is still listed: %+v", got)
	}
	if !p.Connected() {
		t.Error("the connection went down with the channel")
	}
	// Another channel opens on the same connection.
	if _, err := p.OpenSender(ctx, taskid.ID{Processor: 1}, taskid.ID{Processor: 3}); err != nil {
		t.Fatal(err)
	}
	if f := readFrame(t, r); f.Type != wire.FrameOpen {
		t.Errorf("after the CLOSE came %v, want the new channel's OPEN", f.Type)
	}
}
