package transport

import (
	"context"
	"testing"
	"time"

	"github.com/sluicehq/sluice/taskid"
)

// parkedAckPair opens two channels, a and b, from tx to rx over one
// connection, and sends one message on a whose ack arrives while the test
// holds a's lock as a sender pushing a run does (longHold): rx's handler
// for a's target holds the message until a's lock is taken, and the test
// waits until the ack is parked. It returns with a's lock so held;
// releaseLong lets go of it.
func parkedAckPair(t *testing.T, be []Option) (a, b *Sender, ctx context.Context) {
	t.Helper()
	ctx = ctxT(t, 20*time.Second)
	rx, _, p := newPairOn(t, be, nil, nil)
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	held := taskid.ID{Processor: 1}
	if err := rx.HandleInline(held, func(taskid.Channel, uint64, []Message) {
		arrived <- struct{}{}
		<-release
	}); err != nil {
		t.Fatal(err)
	}
	if err := rx.HandleInline(taskid.ID{Processor: 2}, func(taskid.Channel, uint64, []Message) {}); err != nil {
		t.Fatal(err)
	}
	var err error
	if a, err = p.OpenSender(ctx, taskid.ID{}, held); err != nil {
		t.Fatal(err)
	}
	if b, err = p.OpenSender(ctx, taskid.ID{Index: 1}, taskid.ID{Processor: 2}); err != nil {
		t.Fatal(err)
	}
	if err := a.Send(ctx, 1, []byte("held")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-arrived:
	case <-ctx.Done():
		t.Fatal("the message did not arrive")
	}
	a.ch.mu.Lock()
	a.ch.longHold.Store(true)
	close(release)
	// Not waitFor: the lock is let go before failing, or the nodes'
	// shutdown would wait for it.
	for !a.ch.hasParked.Load() {
		if ctx.Err() != nil {
			releaseLong(a.ch, (*channel).unlock)
			t.Fatal("no ack was parked for the locked channel")
		}
		time.Sleep(time.Millisecond)
	}
	return a, b, ctx
}

// releaseLong ends a long hold of ch's lock, releasing it with unlock.
func releaseLong(ch *channel, unlock func(*channel)) {
	ch.longHold.Store(false)
	unlock(ch)
}

// unacked is how many messages a channel's window retains.
func unacked(ch *channel) int {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	n, _ := ch.mu.src.Retained()
	return n
}

// The loop that reads a channel's acks does not wait for a sender holding
// the channel's lock for a run: it parks the ack and goes on reading, here
// the acks of another channel on the same connection; the sender applies
// the parked ack as it lets go. A loop that waited for the lock could not
// read the other channel's ack until the test let go.
func TestTheLoopParksAnAckForALockedChannel(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be []Option) {
		a, b, ctx := parkedAckPair(t, be)
		locked := true
		defer func() {
			if locked {
				releaseLong(a.ch, (*channel).unlock)
			}
		}()
		if err := b.Send(ctx, 1, []byte("free")); err != nil {
			t.Fatal(err)
		}
		fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := b.Flush(fctx); err != nil {
			t.Fatalf("the other channel's ack was not applied while the first channel's lock was held: %v", err)
		}
		releaseLong(a.ch, (*channel).unlock)
		locked = false
		if a.ch.hasParked.Load() {
			t.Fatal("the parked ack is still parked after the holder let go")
		}
		if n := unacked(a.ch); n != 0 {
			t.Fatalf("%d messages unacknowledged after the holder applied the parked ack", n)
		}
		if err := a.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

// A holder that releases the lock without applying parked acks (the peer's
// own bookkeeping, which holds the peer's lock) leaves them to the node's
// timer, whose tick the outstanding ack request keeps scheduled.
func TestAnAckLeftParkedIsAppliedByTheTimer(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be []Option) {
		a, _, ctx := parkedAckPair(t, be)
		ticked := make(chan struct{}, 1)
		hook := func(ch *channel, _ int) {
			if ch == a.ch {
				select {
				case ticked <- struct{}{}:
				default:
				}
			}
		}
		testHookTicked.Store(&hook)
		t.Cleanup(func() { testHookTicked.Store(nil) })
		releaseLong(a.ch, func(ch *channel) { ch.mu.Unlock() })
		waitFor(t, 10*time.Second, "the parked ack to be applied", func() bool { return !a.ch.hasParked.Load() })
		select {
		case <-ticked:
		case <-ctx.Done():
			t.Fatal("the channel's tick did not run")
		}
		if n := unacked(a.ch); n != 0 {
			t.Fatalf("%d messages unacknowledged after the tick", n)
		}
	})
}
