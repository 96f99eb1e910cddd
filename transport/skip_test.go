package transport

import (
	"bytes"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/wire"
)

// A source that closes a channel with messages it never sent and opens it
// again where it left off skips them: its OPEN is beyond what the receiver
// expects. The receiver's answer waits for the task to consume what it
// accepted before the OPEN: it answered at once, and the source, given its
// whole window back, could send another while those messages still waited
// for a slow handler (a window more for every close and reopen).
func TestAnOpenThatSkipsIsAnsweredOnceTheTaskHasWhatCameBefore(t *testing.T) {
	rx := listeningNode(t, nil)
	src, dst := taskid.ID{Processor: 9}, taskid.ID{Processor: 9, Index: 1}
	release := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	if err := rx.Handle(dst, func(taskid.Channel, uint64, []Message) { <-release }); err != nil {
		t.Fatal(err)
	}
	b := wire.AppendOpen(goodPreface(), wire.Open{Channel: 0, Source: src, Target: dst, Epoch: 1})
	f, start := wire.BeginFrame(b, wire.FrameData, 0)
	f = wire.AppendRunHeader(f, wire.RunHeader{Channel: 0, FirstSeq: 0, Count: 2})
	f = wire.AppendMessage(f, 0, 0, []byte("a"))
	f = wire.AppendMessage(f, 0, 0, []byte("b"))
	b = wire.FinishFrame(f, start)
	// 2..9 were dropped unsent: the channel opens again at 10.
	b = wire.AppendOpen(b, wire.Open{Channel: 0, Source: src, Target: dst, Epoch: 1, FirstSeq: 10})
	// The PONG comes after whatever the receiver answered to the above.
	b = wire.AppendPing(b, 7, 0)
	c := rawConn(t, rx.Addr())
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
	r := &frameReader{t: t, c: c}
	for {
		f := r.next()
		if f.Type == wire.FramePong {
			break
		}
		if a := r.ack(f); a != nil && a.Next > 0 {
			t.Fatalf("the receiver acknowledged up to %d (open: %v) while the task still has messages 0 and 1", a.Next, a.Flags&wire.AckOpen != 0)
		}
	}
	close(release)
	for {
		if a := r.ack(r.next()); a != nil && a.Flags&wire.AckOpen != 0 && a.Next == 10 {
			return
		}
	}
}

// frameReader reads the frames a node sends a raw peer, past its preface.
type frameReader struct {
	t   *testing.T
	c   net.Conn
	buf []byte
	pre bool
}

func (r *frameReader) next() wire.Frame {
	r.t.Helper()
	_ = r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		if !r.pre && len(r.buf) >= wire.PrefaceLen {
			r.buf, r.pre = r.buf[wire.PrefaceLen:], true
		}
		if r.pre {
			f, n, err := wire.DecodeFrame(r.buf, wire.DefaultMaxFrame)
			if err == nil {
				f.Body = bytes.Clone(f.Body)
				r.buf = r.buf[n:]
				return f
			}
			if !errors.Is(err, wire.ErrNeedMore) {
				r.t.Fatal(err)
			}
		}
		var p [4096]byte
		n, err := r.c.Read(p[:])
		if err != nil {
			r.t.Fatalf("reading from the node: %v", err)
		}
		r.buf = append(r.buf, p[:n]...)
	}
}

// ack returns f's ACK, or nil if f is not one.
func (r *frameReader) ack(f wire.Frame) *wire.Ack {
	r.t.Helper()
	if f.Type != wire.FrameAck {
		return nil
	}
	a, err := wire.ParseAck(f.Body)
	if err != nil {
		r.t.Fatal(err)
	}
	return &a
}
