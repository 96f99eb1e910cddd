package transport

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/window"
)

// gate is a handler factory whose handlers block until the gate opens,
// then collect as a collector does.
type gate struct {
	open chan struct{}
	once sync.Once
	col  *collector
}

// newGate returns a closed gate. Call it after the nodes are made: it opens
// when the test ends, before they are aborted (which waits for handlers).
func newGate(t *testing.T) *gate {
	g := &gate{open: make(chan struct{}), col: newCollector()}
	t.Cleanup(g.release)
	return g
}

func (g *gate) release() { g.once.Do(func() { close(g.open) }) }

func (g *gate) handler(id taskid.ID) Handler {
	h := g.col.handler(id)
	return func(ch taskid.Channel, first uint64, msgs []Message) {
		<-g.open
		h(ch, first, msgs)
	}
}

// handleGated gives the targets with index i < len(gates) to gates[i]'s
// handlers and the others to col.
func handleGated(rx *Node, gates []*gate, col *collector) {
	rx.HandleAll(func(id taskid.ID) Handler {
		if int(id.Index) < len(gates) {
			return gates[id.Index].handler(id)
		}
		return col.handler(id)
	})
}

// openSenders opens n channels to p, from tasks (0, i) to tasks
// (1, i % targets).
func openSenders(t *testing.T, ctx context.Context, p *Peer, n, targets int) []*Sender {
	t.Helper()
	senders := make([]*Sender, n)
	for i := range senders {
		var err error
		senders[i], err = p.OpenSender(ctx, taskid.ID{Index: uint32(i)}, taskid.ID{Processor: 1, Index: uint32(i % targets)})
		if err != nil {
			t.Fatal(err)
		}
	}
	return senders
}

// peerStats returns the stats of tx's only peer.
func peerStats(t *testing.T, tx *Node) PeerStats {
	t.Helper()
	ps := tx.Stats().Peers
	if len(ps) != 1 {
		t.Fatalf("%d peers in Stats, want 1", len(ps))
	}
	return ps[0]
}

// TestPeerBudgetBoundsWindowMemory fills the windows of many channels whose
// receiver consumes nothing: what their rings take, not only the payloads
// they retain, stays within the peer budget, and everything sent arrives
// once the receiver consumes.
func TestPeerBudgetBoundsWindowMemory(t *testing.T) {
	const budget, channels, size = 256 << 10, 100, 100
	rx, tx, p := newPair(t, nil, []Option{WithPeerBudget(budget), WithWindow(1024, 64<<10)})
	g := newGate(t)
	rx.HandleAll(g.handler)
	ctx := ctxT(t, 20*time.Second)
	senders := openSenders(t, ctx, p, channels, channels)
	// Bursts of uneven length, so that rings of many sizes compete for the
	// budget, until a whole pass finds no credit anywhere.
	sent := make([]uint64, channels)
	for progressed := true; progressed; {
		progressed = false
		for i, s := range senders {
			for range 1 + i%37 {
				err := s.TrySend(0, payload(s.Channel(), sent[i], size))
				if errors.Is(err, ErrNoCredit) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				sent[i]++
				progressed = true
			}
		}
		if st := peerStats(t, tx); st.WindowBytes > budget {
			t.Fatalf("windows take %d bytes, over the budget of %d", st.WindowBytes, budget)
		}
	}
	var total uint64
	for _, n := range sent {
		total += n
	}
	var sum int64
	for _, c := range tx.ChannelStats() {
		sum += int64(c.WindowBytes)
	}
	if pst := peerStats(t, tx); sum != pst.WindowBytes || pst.Budget != budget || pst.Channels != channels {
		t.Errorf("peer stats %+v, its channels' windows sum to %d", pst, sum)
	}
	// The budget, not the windows (64 KiB each), stopped the
	// senders, and most of it holds payload.
	if total*size < budget/3 || total*size > budget {
		t.Errorf("sent %d bytes against a budget of %d", total*size, budget)
	}
	g.release()
	for _, s := range senders {
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	g.col.check(t, int64(total))
}

// TestIdleWindowsGiveBackTheirMemory: windows that emptied while the budget
// was plentiful keep their rings for the next burst; once those rings are
// all that stands between a sender and the budget, they are taken back, even
// though no ack will ever come to their channels again.
func TestIdleWindowsGiveBackTheirMemory(t *testing.T) {
	// A default window's 1 MiB: sixteen payloads of 64 KiB less their heads.
	const size, burst = 64<<10 - MaxMessageHead, 16
	// Room for three full windows (1 MiB of ring and a 32-byte record a
	// message each) and less than a fourth message.
	const budget = 3*(1<<20+burst*32) + size/2
	rx, tx, p := newPair(t, nil, []Option{WithPeerBudget(budget)})
	// The first three targets consume only once their gate opens, so that
	// each burst fills its whole window before any of it is acknowledged
	// (and grows its rings to 1 MiB) however the machine schedules.
	gates, col := []*gate{newGate(t), newGate(t), newGate(t)}, newCollector()
	handleGated(rx, gates, col)
	ctx := ctxT(t, 20*time.Second)
	senders := openSenders(t, ctx, p, 5, 5)
	sendBurst := func(s *Sender, ctx context.Context) error {
		for k := range burst {
			if err := s.Send(ctx, 0, payload(s.Channel(), uint64(k), size)); err != nil {
				return err
			}
		}
		return nil
	}
	for i, s := range senders[:2] {
		if err := sendBurst(s, ctx); err != nil {
			t.Fatal(err)
		}
		gates[i].release()
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if st := peerStats(t, tx); st.IdleBytes < 2*burst*size {
		t.Fatalf("after two bursts that were acknowledged: %+v, want two idle windows", st)
	}
	// The gated channel fills a third window and keeps it.
	if err := sendBurst(senders[2], ctx); err != nil {
		t.Fatal(err)
	}
	// Nothing is left for another channel but the idle rings.
	if err := senders[4].TrySend(0, payload(senders[4].Channel(), 0, size)); !errors.Is(err, ErrNoCredit) {
		t.Fatalf("TrySend with the budget held by idle rings: %v, want ErrNoCredit", err)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err := sendBurst(senders[4], sctx)
	if err == nil {
		err = senders[4].Flush(sctx)
	}
	if err != nil {
		t.Fatalf("a sender short of budget while idle windows held it: %v (%+v)", err, peerStats(t, tx))
	}
	if st := peerStats(t, tx); st.WindowBytes > budget || st.IdleBytes > budget {
		t.Errorf("after reclaiming: %+v", st)
	}
	gates[2].release()
	if err := senders[2].Flush(ctx); err != nil {
		t.Fatal(err)
	}
	col.check(t, burst)
	for _, g := range gates {
		g.col.check(t, burst)
	}
}

// TestBudgetAccountingBalances runs senders of mixed sizes on many channels
// against a budget small enough to be short all the time, so that windows
// are charged, trimmed and reclaimed concurrently with acks: everything
// arrives once, the budget is never passed, and once every channel is
// closed the peer holds nothing.
func TestBudgetAccountingBalances(t *testing.T) {
	const channels, perChannel = 40, 400
	w := window.Config{MaxMessages: 256, MaxBytes: 32 << 10} // its footprint sizes the budget
	budget := 4 * w.MaxFootprint()
	rx, tx, p := newPair(t, nil, []Option{WithPeerBudget(budget), WithWindow(w.MaxMessages, w.MaxBytes)})
	col := newCollector()
	rx.HandleAll(col.handler)
	ctx := ctxT(t, 30*time.Second)
	senders := openSenders(t, ctx, p, channels, 7)
	done := make(chan struct{})
	over := make(chan PeerStats, 1)
	go func() { // watch the budget while the senders run
		for {
			select {
			case <-done:
				return
			default:
			}
			if st := peerStats(t, tx); st.WindowBytes > int64(budget) {
				select {
				case over <- st:
				default:
				}
			}
			time.Sleep(100 * time.Microsecond)
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, channels)
	for i, s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range perChannel {
				size := 8 + (k*131+i*17)%(2<<10) // 8 B to 2 KiB
				if k%50 == 49 {
					size = 12 << 10 // now and then a burst-sized one
				}
				if err := s.Send(ctx, int64(k), payload(s.Channel(), uint64(k), size)); err != nil {
					errs <- err
					return
				}
			}
			if err := s.Flush(ctx); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(done)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	select {
	case st := <-over:
		t.Errorf("windows took %d bytes, over the budget of %d", st.WindowBytes, budget)
	default:
	}
	col.check(t, channels*perChannel)
	for _, s := range senders {
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if st := peerStats(t, tx); st.WindowBytes != 0 || st.IdleBytes != 0 || st.Channels != 0 {
		t.Errorf("after closing every channel the peer holds %+v, want nothing", st)
	}
}

// TestSmallIdleWindowsYieldToALargeMessage: twenty channels sent a burst
// each and went quiet, each keeping rings within its share of the budget;
// together they hold most of it. A channel that now needs a window's worth
// for one message gets it within a few reclaim intervals, though no ack
// will ever come to the quiet channels again.
func TestSmallIdleWindowsYieldToALargeMessage(t *testing.T) {
	w := window.Config{MaxMessages: 64, MaxBytes: 64 << 10} // its footprint sizes the budget
	budget := 2 * w.MaxFootprint()
	rx, tx, p := newPair(t, nil, []Option{WithPeerBudget(budget), WithWindow(w.MaxMessages, w.MaxBytes)})
	// The quiet channels' targets consume only once their gate opens, so
	// that each burst is retained whole (and grows its rings to 4 KiB)
	// however the machine schedules.
	gates, col := make([]*gate, 20), newCollector()
	for i := range gates {
		gates[i] = newGate(t)
	}
	handleGated(rx, gates, col)
	ctx := ctxT(t, 20*time.Second)
	senders := openSenders(t, ctx, p, 21, 21)
	for i, s := range senders[:20] {
		for k := range 40 {
			if err := s.Send(ctx, 0, payload(s.Channel(), uint64(k), 100)); err != nil {
				t.Fatal(err)
			}
		}
		gates[i].release()
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	st := peerStats(t, tx)
	if free := int64(budget) - st.WindowBytes; free >= int64(w.MaxBytes) {
		t.Fatalf("the quiet channels hold %d of %d bytes: room is left for a large message, the test proves nothing", st.WindowBytes, budget)
	}
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	big := senders[20]
	if err := big.Send(sctx, 0, payload(big.Channel(), 0, w.MaxBytes-MaxMessageHead)); err != nil {
		t.Fatalf("a message of a whole window with quiet windows holding the budget: %v (%+v)", err, peerStats(t, tx))
	}
	if err := big.Flush(sctx); err != nil {
		t.Fatal(err)
	}
	col.check(t, 1)
	for _, g := range gates {
		g.col.check(t, 40)
	}
}
