package transport

import (
	"context"
	"errors"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/taskid"
)

// closedAddr returns a loopback address nothing listens on: a dial there
// is refused at once.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// checkPeerGone checks that p is closed for good and that its node has
// forgotten it: no peer, no connection, no channel left.
func checkPeerGone(t *testing.T, ctx context.Context, tx *Node, p *Peer) {
	t.Helper()
	if _, err := p.OpenSender(ctx, taskid.ID{Index: 99}, taskid.ID{Processor: 99}); !errors.Is(err, ErrClosed) {
		t.Errorf("OpenSender on a closed peer: %v, want ErrClosed", err)
	}
	if err := p.WaitConnected(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("WaitConnected on a closed peer: %v, want ErrClosed", err)
	}
	s := tx.Stats()
	if len(s.Peers) != 0 || len(s.Conns) != 0 {
		t.Errorf("after Peer.Close the node still has %d peers and %d connections", len(s.Peers), len(s.Conns))
	}
	if cs := tx.ChannelStats(); len(cs) != 0 {
		t.Errorf("after Peer.Close the node still has %d channels", len(cs))
	}
}

// A peer closed while its sender waits for credit in Send and a Flush
// waits for acks ends both with an error that is ErrClosed and names the
// peer; the node keeps nothing of it.
func TestPeerCloseEndsSendAndFlushWaitingOnIt(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be []Option) {
		const window = 4
		// No handler at rx: its messages wait there, unacknowledged.
		_, tx, p := newPairOn(t, be, nil, []Option{WithWindow(window, 1<<20)})
		ctx := ctxT(t, 10*time.Second) // hang guard
		s, err := p.OpenSender(ctx, taskid.ID{Index: 1}, taskid.ID{Processor: 1})
		if err != nil {
			t.Fatal(err)
		}
		for i := range window {
			if err := s.Send(ctx, 0, payload(s.Channel(), uint64(i), 8)); err != nil {
				t.Fatal(err)
			}
		}
		sent, flushed := make(chan error, 1), make(chan error, 1)
		go func() { sent <- s.Send(ctx, 0, payload(s.Channel(), window, 8)) }()
		go func() { flushed <- s.Flush(ctx) }()
		waitFor(t, 10*time.Second, "Send waiting for credit and Flush for acks", func() bool {
			return s.ch.credit.waiters.Load() == 1 && p.drained.waiters.Load() == 1
		})
		if err := p.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		for what, ch := range map[string]chan error{"Send": sent, "Flush": flushed} {
			err := <-ch
			var ce *ChannelError
			if !errors.Is(err, ErrClosed) || !errors.As(err, &ce) || !strings.Contains(err.Error(), p.Addr()) {
				t.Errorf("%s waiting when its peer closed: %v, want a ChannelError that is ErrClosed and names %s", what, err, p.Addr())
			}
		}
		if err := s.TrySend(0, payload(s.Channel(), 0, 8)); !errors.Is(err, ErrClosed) {
			t.Errorf("TrySend after Peer.Close: %v, want ErrClosed", err)
		}
		checkPeerGone(t, ctx, tx, p)
	})
}

// A peer whose address refuses connections is redialed until it is
// closed; Close stops that, and its sender, holding a message that never
// left, fails with ErrClosed.
func TestPeerCloseStopsRedialingAnAddressThatRefuses(t *testing.T) {
	tx := testNode(t, WithReconnectBackoff(time.Millisecond, 2*time.Millisecond))
	p, err := tx.Peer(closedAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 10*time.Second) // hang guard
	s, err := p.OpenSender(ctx, taskid.ID{Index: 1}, taskid.ID{Processor: 1})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(ctx, 0, payload(s.Channel(), 0, 8)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "failed dials", func() bool { return p.dialFailures.Load() >= 3 })
	if err := p.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Flush(ctx); !errors.Is(err, ErrClosed) {
		t.Errorf("Flush of a message that never left, after Peer.Close: %v, want ErrClosed", err)
	}
	checkPeerGone(t, ctx, tx, p)
}

// A peer closed and dialed again is a new peer that works: a channel
// opened again with the same key goes on where the closed peer's left
// off (the receiver keeps the pair's state), so every message of both
// arrives once, in order. Closing the old peer again changes nothing for
// the new one.
func TestAPeerClosedAndDialedAgainCarriesOn(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be []Option) {
		rx, tx, p := newPairOn(t, be, nil, nil)
		received := recordNumbers(rx)
		ctx := ctxT(t, 20*time.Second) // hang guard
		src, dst := taskid.ID{Index: 1}, taskid.ID{Processor: 1, Index: 1}
		send := func(p *Peer, from, n uint64) *Sender {
			t.Helper()
			s, err := p.OpenSender(ctx, src, dst)
			if err != nil {
				t.Fatal(err)
			}
			for k := from; k < from+n; k++ {
				if err := s.Send(ctx, 0, payload(s.Channel(), k, 8)); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Flush(ctx); err != nil {
				t.Fatalf("Flush of messages %d..%d: %v", from, from+n-1, err)
			}
			return s
		}
		send(p, 0, 10)
		if err := p.Close(); err != nil {
			t.Fatal(err)
		}
		again, err := tx.Peer(rx.Addr())
		if err != nil {
			t.Fatal(err)
		}
		if again == p {
			t.Fatal("Node.Peer after Peer.Close returned the closed peer")
		}
		s := send(again, 10, 10)
		if err := p.Close(); err != nil { // again: nothing to do
			t.Fatal(err)
		}
		if err := s.Send(ctx, 0, payload(s.Channel(), 20, 8)); err != nil {
			t.Fatalf("Send on the new peer after the old one was closed again: %v", err)
		}
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		if ps := tx.Stats().Peers; len(ps) != 1 || ps[0].Up != 1 {
			t.Errorf("peers %+v: want the new peer alone, connected", ps)
		}
		want := make([]uint64, 21)
		for i := range want {
			want[i] = uint64(i)
		}
		if got := received(); !slices.Equal(got, want) {
			t.Errorf("received %v, want 0..20 once each, in order", got)
		}
	})
}

// Peer.Close run twice at once, with senders opening, sending and
// flushing, Node.Peer dialing the address again and Node.Close shutting
// the node down: everything returns, and every error says closed.
func TestPeerCloseRacesWithSendersAndNodeClose(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be []Option) {
		for round := range 5 {
			rx := listeningNode(t, be)
			rx.HandleAll(func(taskid.ID) Handler { return func(taskid.Channel, uint64, []Message) {} })
			tx, err := NewNode(append([]Option{WithWindow(16, 1<<20)}, be...)...)
			if err != nil {
				t.Fatal(err)
			}
			p, err := tx.Peer(rx.Addr())
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t, 20*time.Second) // hang guard
			errs := make(chan error, 64)
			var wg sync.WaitGroup
			var sent atomic.Int64
			start := make(chan struct{})
			// The closers start once the senders are under way, a little
			// later each round.
			closing := make(chan struct{})
			go func() {
				defer close(closing)
				for sent.Load() < int64(20*round) && ctx.Err() == nil {
					time.Sleep(time.Millisecond)
				}
			}()
			for i := range 4 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					s, err := p.OpenSender(ctx, taskid.ID{Index: uint32(i)}, taskid.ID{Processor: 1})
					if err != nil {
						errs <- err
						return
					}
					for k := 0; ; k++ {
						if err := s.Send(ctx, 0, payload(s.Channel(), uint64(k), 8)); err != nil {
							errs <- err
							break
						}
						sent.Add(1)
						if k%8 == 7 {
							if err := s.Flush(ctx); err != nil {
								errs <- err
								break
							}
						}
					}
					errs <- s.Close()
				}()
			}
			for range 2 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-closing
					errs <- p.Close()
				}()
			}
			wg.Add(2)
			go func() {
				defer wg.Done()
				<-closing
				for {
					q, err := tx.Peer(rx.Addr())
					if err != nil {
						errs <- err
						return
					}
					if q != p {
						_ = q.Close()
					}
				}
			}()
			go func() {
				defer wg.Done()
				<-closing
				errs <- tx.Close(ctx)
			}()
			close(start)
			wg.Wait()
			close(errs)
			for err := range errs {
				if err != nil && !errors.Is(err, ErrClosed) {
					t.Errorf("round %d: %v, want nil or ErrClosed", round, err)
				}
			}
			if ps := tx.Stats().Peers; len(ps) != 0 {
				t.Errorf("round %d: %d peers left after Node.Close", round, len(ps))
			}
		}
	})
}
