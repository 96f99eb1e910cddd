package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/taskid"
)

// unstoppedInboxes counts n's inboxes whose goroutine shutdown has not
// told to stop.
func unstoppedInboxes(n *Node) (unstopped, all int) {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, in := range n.mu.inboxes {
		if !in.stopped.Load() {
			unstopped++
		}
	}
	return unstopped, len(n.mu.inboxes)
}

func TestANodeShuttingDownOpensNoNewReceivingPair(t *testing.T) {
	rx := listeningNode(t, nil)
	rx.HandleAll(func(taskid.ID) Handler { return func(taskid.Channel, uint64, []Message) {} })
	known := taskid.ID{Processor: 1}
	if _, err := rx.recvState(taskid.ID{}, known); err != nil {
		t.Fatal(err)
	}
	rx.Abort()
	// What a loop still decoding OPENs when shutdown closed its
	// connections asks for.
	if _, err := rx.recvState(taskid.ID{}, taskid.ID{Processor: 2}); !errors.Is(err, ErrClosed) {
		t.Errorf("a new pair's receiving state after Abort: err %v, want ErrClosed", err)
	}
	if _, err := rx.recvState(taskid.ID{}, known); err != nil {
		t.Errorf("the receiving state of a pair known before Abort: %v, want it as it was", err)
	}
	if unstopped, _ := unstoppedInboxes(rx); unstopped != 0 {
		t.Errorf("%d inboxes were started after shutdown stopped the others", unstopped)
	}
}

func TestAbortReturnsWhileAPeerKeepsOpeningChannels(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be []Option) {
		for round := range 20 {
			// Not aborted at cleanup: after a hang, that would hang too.
			rx, err := NewNode(append([]Option{WithListen("127.0.0.1:0"), WithMaxReceivers(1 << 20)}, be...)...)
			if err != nil {
				t.Fatal(err)
			}
			rx.HandleAll(func(taskid.ID) Handler { return func(taskid.Channel, uint64, []Message) {} })
			tx := testNode(t, be...)
			p, err := tx.Peer(rx.Addr())
			if err != nil {
				rx.Abort()
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			opening := make(chan struct{})
			// Abort once OPENs stream in, a little later each round.
			want := 20 * (round + 1)
			go func() {
				defer close(opening)
				for i := uint32(0); ctx.Err() == nil; i++ {
					// The opener keeps 2,000 channels at most ahead of
					// the receiver's inboxes: enough that OPENs still
					// stream in as it aborts, and a slow machine's loop,
					// whose writes fall behind the opener, is not handed
					// channels without end (under -race on a third of a
					// core, the receiver had not made 20 inboxes after 6
					// minutes, or the sender's Abort took minutes).
					for i%64 == 0 && ctx.Err() == nil {
						if _, all := unstoppedInboxes(rx); int(i) < all+2000 {
							break
						}
						time.Sleep(time.Millisecond)
					}
					s, err := p.OpenSender(ctx, taskid.ID{}, taskid.ID{Processor: 1, Index: i})
					if err != nil {
						return
					}
					_ = s.TrySend(1, []byte("x"))
				}
			}()
			for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Millisecond) { // a hang guard
				_, all := unstoppedInboxes(rx)
				if all >= want {
					break
				}
				if time.Now().After(deadline) {
					cancel()
					rx.Abort()
					t.Fatalf("round %d: the receiver made %d inboxes in a minute, want %d to abort it", round, all, want)
				}
			}
			aborted := make(chan struct{})
			go func() { rx.Abort(); close(aborted) }()
			select {
			case <-aborted:
			case <-time.After(20 * time.Second): // hang guard
				unstopped, all := unstoppedInboxes(rx)
				t.Fatalf("round %d: Abort has not returned; %d of its %d inboxes were never told to stop", round, unstopped, all)
			}
			if unstopped, all := unstoppedInboxes(rx); unstopped != 0 {
				t.Fatalf("round %d: after Abort, %d of %d inboxes were never told to stop", round, unstopped, all)
			}
			cancel()
			tx.Abort()
			<-opening
		}
	})
}

// A dial whose socket connects as its node begins to shut down, before the
// shutdown has closed the dial's peer, is cut short by the node, which
// tracks no connection once it is closing: that is the node's shutdown,
// not a failed dial, and the peer's DialFailures do not count it.
func TestADialCutShortByItsNodesShutdownIsNoDialFailure(t *testing.T) {
	rx := listeningNode(t, nil)
	tx := testNode(t)
	dialed, dialGoesOn := make(chan *Peer, 1), make(chan struct{})
	var first sync.Once
	dialHook := func(p *Peer) {
		if p.node == tx {
			first.Do(func() {
				dialed <- p
				<-dialGoesOn
			})
		}
	}
	testHookDialed.Store(&dialHook)
	t.Cleanup(func() { testHookDialed.Store(nil) })
	begun, shutdownGoesOn := make(chan struct{}), make(chan struct{})
	shutdownHook := func(n *Node) {
		if n == tx {
			close(begun)
			<-shutdownGoesOn
		}
	}
	testHookShutdownBegun.Store(&shutdownHook)
	t.Cleanup(func() { testHookShutdownBegun.Store(nil) })
	// Before the nodes' aborts, should the test end early.
	releaseDial := sync.OnceFunc(func() { close(dialGoesOn) })
	t.Cleanup(releaseDial)
	releaseShutdown := sync.OnceFunc(func() { close(shutdownGoesOn) })
	t.Cleanup(releaseShutdown)

	if _, err := tx.Peer(rx.Addr()); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 20*time.Second) // hang guard
	var p *Peer
	select {
	case p = <-dialed:
	case <-ctx.Done():
		t.Fatal("the peer's socket never connected")
	}
	aborted := make(chan struct{})
	go func() {
		defer close(aborted)
		tx.Abort()
	}()
	select {
	case <-begun:
	case <-ctx.Done():
		t.Fatal("the node's shutdown never began")
	}
	// The node is closing and has yet to close the peer: the dial goes on
	// to a node that refuses its connection, and its loop decides what
	// that was before the shutdown closes the peer.
	loopEnded := make(chan struct{})
	go func() {
		p.wg.Wait()
		close(loopEnded)
	}()
	releaseDial()
	waitFor(t, 20*time.Second, "the dial loop to count a failure or end", func() bool {
		select {
		case <-loopEnded:
			return true
		default:
			return p.dialFailures.Load() > 0
		}
	})
	releaseShutdown()
	<-aborted
	ps := tx.Stats().Peers
	if len(ps) != 1 {
		t.Fatalf("the node lists %d peers after Abort, want the one", len(ps))
	}
	if f := ps[0].DialFailures; f != 0 {
		t.Errorf("peer %s: %d dial failures counted for a dial its node's shutdown cut short, want 0", ps[0].Addr, f)
	}
}

// A node that aborts with many senders blocked on a peer's budget wakes
// them once, not once for each channel it closes. Every broadcast of the
// peer's budget (or drained) wakes every sender waiting on it, each to
// look at its channel and wait again: closing N channels with a broadcast
// each cost N times the waiting senders, and with one blocked sender a
// channel Abort grew with the square of the channels (64,000 channels:
// 1.4-2.3 s on gnet, 38-43 s on the net backend, 22-89 s with TLS). What
// is counted is the broadcasts, which do not depend on the machine's
// speed; how many senders each one woke does.
func TestAbortWakesTheSendersWaitingForAPeersBudgetOnce(t *testing.T) {
	const channels = 1000
	forEachBackend(t, func(t *testing.T, be []Option) {
		rx := holdingNode(t, be)
		tx, p, senders := sendersBlockedOnTheBudget(t, rx.Addr(), be, channels)
		budget, drained := p.budget.gen.Load(), p.drained.gen.Load()
		tx.Abort()
		budget, drained = p.budget.gen.Load()-budget, p.drained.gen.Load()-drained
		senders.Wait()
		// One of each is what closing the peer needs; acks of OPENs the
		// loop may still read as the node shuts down free nothing, and
		// broadcast neither.
		if budget > channels/10 || drained > channels/10 {
			t.Errorf("Abort of a node with %d channels to a peer broadcast its budget %d times and drained %d times, want a few",
				channels, budget, drained)
		}
	})
}

// Senders blocked on a peer's budget sleep until something may have freed
// it: an ack, a channel closing, or the node taking back the rings of
// quiet windows, which it looks for on their behalf. Each one used to wake
// every reclaim interval (100 ms) to look for itself: 16,000 blocked
// senders kept 0.8 of a core busy doing nothing, and an Abort of 64,000
// channels with a sender blocked on each competed with 640,000 wake-ups a
// second.
// The wake-ups are counted while the budget stands still for three
// reclaim intervals, the node's looks telling the intervals apart: none
// of the looks frees anything (every window holds what it sent), so none
// wakes a sender.
func TestSendersBlockedOnAPeersBudgetSleepWhileItStandsStill(t *testing.T) {
	const channels = 1000
	forEachBackend(t, func(t *testing.T, be []Option) {
		rx := holdingNode(t, be)
		_, p, _ := sendersBlockedOnTheBudget(t, rx.Addr(), be, channels)
		ctx := ctxT(t, time.Minute)
		for waiting := 0; waiting < channels; time.Sleep(time.Millisecond) {
			if ctx.Err() != nil {
				t.Fatalf("%d of %d senders wait for the peer's budget, want all", waiting, channels)
			}
			p.credit.mu.Lock()
			waiting = p.credit.waiters
			p.credit.mu.Unlock()
		}
		var waits atomic.Int64
		hook := func(*channel) { waits.Add(1) }
		testHookCreditWait.Store(&hook)
		t.Cleanup(func() { testHookCreditWait.Store(nil) })
		looked := p.lookedAt.Load()
		for looks := 0; looks < 3; time.Sleep(time.Millisecond) {
			if ctx.Err() != nil {
				t.Fatalf("the budget was looked at %d times in a minute with senders blocked on it, want 3", looks)
			}
			if at := p.lookedAt.Load(); at != looked {
				looked = at
				looks++
			}
		}
		if n := waits.Load(); n > channels/10 {
			t.Errorf("%d blocked senders woke %d times in three reclaim intervals in which nothing freed the budget, want none", channels, n)
		}
	})
}

// holdingNode is a listening node whose handlers hold their first run
// until the test ends: it acknowledges nothing but OPENs, and no ack wakes
// a sender.
func holdingNode(tb testing.TB, be []Option) *Node {
	rx := listeningNode(tb, be)
	hold := make(chan struct{})
	tb.Cleanup(func() { close(hold) }) // before rx's Abort, which waits for them
	rx.HandleAll(func(taskid.ID) Handler { return func(taskid.Channel, uint64, []Message) { <-hold } })
	return rx
}

// sendersBlockedOnTheBudget opens channels channels from a new node to the
// node at addr, which acknowledges nothing (holdingNode), and sends on
// each from a goroutine of its own until the peer's budget (2 MiB) is
// full; it returns once half the senders at least wait for it. The
// senders end when their channels close.
func sendersBlockedOnTheBudget(tb testing.TB, addr string, be []Option, channels int) (tx *Node, p *Peer, senders *sync.WaitGroup) {
	tb.Helper()
	tx = testNode(tb, append([]Option{WithPeerBudget(2 << 20)}, be...)...)
	p, err := tx.Peer(addr)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	tb.Cleanup(cancel)
	senders = new(sync.WaitGroup)
	payload := make([]byte, 1000)
	for i := range channels {
		s, err := p.OpenSender(ctx, taskid.ID{}, taskid.ID{Processor: 1, Index: uint32(i)})
		if err != nil {
			tb.Fatal(err)
		}
		senders.Go(func() {
			for s.Send(ctx, 1, payload) == nil {
			}
		})
	}
	for waiting := 0; waiting < channels/2; time.Sleep(time.Millisecond) {
		if ctx.Err() != nil {
			tb.Fatalf("%d of %d senders wait for the peer's budget, want half of them at least", waiting, channels)
		}
		p.credit.mu.Lock()
		waiting = p.credit.waiters
		p.credit.mu.Unlock()
	}
	return tx, p, senders
}

// BenchmarkAbortWithBlockedSenders measures Abort of a node with a sender
// blocked on its peer's budget on each of its channels (gnet).
func BenchmarkAbortWithBlockedSenders(b *testing.B) {
	for _, channels := range []int{1000, 10000} {
		b.Run(fmt.Sprintf("channels=%d", channels), func(b *testing.B) {
			rx := holdingNode(b, nil)
			for b.Loop() {
				b.StopTimer()
				tx, _, senders := sendersBlockedOnTheBudget(b, rx.Addr(), nil, channels)
				b.StartTimer()
				tx.Abort()
				senders.Wait()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*channels), "ns/channel")
		})
	}
}
