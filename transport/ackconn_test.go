package transport

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/wire"
)

// A channel re-opened on a new connection waits for its Open ack, which the
// receiver holds until the task has consumed what it accepted. An
// ACKREQUEST of the channel read late from the old connection points the
// channel's acks back there (onAckRequest, deec1ab); the old connection
// then closes, and the Open ack the task's consumption releases goes out
// on the closed connection: it is lost. The channel recovers by the
// source's repeat of the OPEN (lossdetect.Tracker: RTO doubled per repeat,
// at most MaxAckTimeout, 1s by default), which points the acks at the new
// connection again and is answered there at once; nothing is lost.
func TestAnOpenAckLostToALateRequestOfAClosedConnectionComesForTheRepeatedOpen(t *testing.T) {
	rx := listeningNode(t, nil)
	src, src2, dst := taskid.ID{Processor: 9}, taskid.ID{Processor: 9, Index: 2}, taskid.ID{Processor: 9, Index: 1}
	release, second := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	if err := rx.Handle(dst, func(ch taskid.Channel, _ uint64, _ []Message) {
		if ch.Source == src2 {
			close(second) // the delivery before it, and its consumption, are done
			return
		}
		<-release
	}); err != nil {
		t.Fatal(err)
	}
	// pong writes a PING on c and returns the frames read up to its PONG.
	pong := func(c net.Conn, r *frameReader, b []byte) []wire.Frame {
		t.Helper()
		if _, err := c.Write(wire.AppendPing(b, 7, 0)); err != nil {
			t.Fatal(err)
		}
		var fs []wire.Frame
		for {
			f := r.next()
			if f.Type == wire.FramePong {
				return fs
			}
			fs = append(fs, f)
		}
	}
	openAck := func(r *frameReader, fs []wire.Frame) *wire.Ack {
		for _, f := range fs {
			if a := r.ack(f); a != nil && a.Channel == 0 && a.Flags&wire.AckOpen != 0 && a.Next == 2 {
				return a
			}
		}
		return nil
	}

	// The old connection: the channel, messages 0 and 1, which the task
	// holds.
	c1 := rawConn(t, rx.Addr())
	r1 := &frameReader{t: t, c: c1}
	b := wire.AppendOpen(goodPreface(), wire.Open{Channel: 0, Source: src, Target: dst, Epoch: 1})
	f, start := wire.BeginFrame(b, wire.FrameData, 0)
	f = wire.AppendRunHeader(f, wire.RunHeader{Channel: 0, FirstSeq: 0, Count: 2})
	f = wire.AppendMessage(f, 0, 0, []byte("a"))
	f = wire.AppendMessage(f, 0, 0, []byte("b"))
	pong(c1, r1, wire.FinishFrame(f, start))

	// The new connection: the channel re-opened (its Open ack waits for
	// the task), and another channel of the target whose message is
	// delivered after 0 and 1 (the fence for their consumption).
	c2 := rawConn(t, rx.Addr())
	r2 := &frameReader{t: t, c: c2}
	b = wire.AppendOpen(goodPreface(), wire.Open{Channel: 0, Source: src, Target: dst, Epoch: 1})
	b = wire.AppendOpen(b, wire.Open{Channel: 1, Source: src2, Target: dst, Epoch: 1})
	f, start = wire.BeginFrame(b, wire.FrameData, 0)
	f = wire.AppendRunHeader(f, wire.RunHeader{Channel: 1, FirstSeq: 0, Count: 1})
	f = wire.AppendMessage(f, 0, 0, []byte("c"))
	if a := openAck(r2, pong(c2, r2, wire.FinishFrame(f, start))); a != nil {
		t.Fatalf("the receiver answered the OPEN (next %d) while the task still has messages 0 and 1", a.Next)
	}

	// The old connection's late ACKREQUEST, then its end.
	pong(c1, r1, wire.AppendAckRequest(nil, wire.AckRequest{Channel: 0, Epoch: 1, Seq: 2}))
	if err := c1.(*net.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	_ = c1.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.Copy(io.Discard, c1); err != nil { // until the node closed it
		t.Fatal(err)
	}

	close(release)
	select {
	case <-second:
	case <-time.After(10 * time.Second):
		t.Fatal("the task was not given the second channel's message")
	}
	if openAck(r2, pong(c2, r2, nil)) == nil {
		t.Log("the Open ack went to the closed connection; the repeated OPEN is to get it")
	}
	// The source's repeat of its unanswered OPEN.
	b = wire.AppendOpen(nil, wire.Open{Channel: 0, Source: src, Target: dst, Epoch: 1})
	if openAck(r2, pong(c2, r2, b)) == nil {
		t.Fatal("the repeated OPEN was not answered on its connection, next 2")
	}
}
