package watermill_test

import (
	"context"
	"encoding/binary"
	"slices"
	"testing"
	"time"

	wm "github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/sluicehq/sluice/transport"
	"github.com/sluicehq/sluice/watermill"
)

// TestSubscriberRestartedMidStream crashes the subscriber's node while the
// publisher is blocked on its credit and a message is in the application's
// hands, and starts a new subscriber on the same address. What each side
// gets, checked against the publisher's own record of what it published:
//
//   - the new subscriber receives, in order and once each, every message
//     from the first one whose acknowledgement had not reached the publisher
//     (read from the publisher's channel counters) up to the last one
//     published: nothing is lost;
//   - the messages the old subscriber's application acked and whose
//     acknowledgement had reached the publisher are not delivered again;
//   - messages it acked whose acknowledgement had not are delivered again:
//     the only duplicates, and only across the crash. A node acknowledges
//     a run once all of it is acked, and then only in answer to the
//     publisher's next AckRequest, so these are fewer than the publisher's
//     window holds (19 to 188 of 256 in our runs; the test logs the count);
//   - every Publish call returns without error: the publisher waits through
//     the outage on its credit and resumes when the new node is up.
func TestSubscriberRestartedMidStream(t *testing.T) {
	const (
		n       = 3000
		crashAt = 700 // the message the old subscriber holds, unacked, when it dies
		window  = 256 // far fewer than n: the publisher blocks on credit
		topic   = "restart"
	)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := watermill.NewMemDirectory()
	pub, err := watermill.NewPublisher(dir, watermill.WithNodeOptions(
		transport.WithWindow(window, 1<<20),
		transport.WithReconnectBackoff(5*time.Millisecond, 50*time.Millisecond),
	))
	if err != nil {
		t.Fatal(err)
	}
	old, err := watermill.NewSubscriber(dir)
	if err != nil {
		t.Fatal(err)
	}
	oldMsgs, err := old.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}

	published := make(chan error, 1)
	go func() {
		for i := range n {
			m := message.NewMessage(wm.NewUUID(), binary.BigEndian.AppendUint32(nil, uint32(i)))
			m.Metadata.Set("index", string(m.Payload))
			if err := pub.Publish(topic, m); err != nil {
				published <- err
				return
			}
		}
		published <- nil
	}()

	index := func(m *message.Message) int {
		if len(m.Payload) != 4 || m.Metadata.Get("index") != string(m.Payload) {
			t.Fatalf("message %s arrived with payload %x and metadata %v", m.UUID, m.Payload, m.Metadata)
		}
		return int(binary.BigEndian.Uint32(m.Payload))
	}

	// The old subscriber acks 0 .. crashAt-1 and dies holding crashAt.
	var acked []int
	for len(acked) <= crashAt {
		select {
		case m := <-oldMsgs:
			i := index(m)
			if i != len(acked) {
				t.Fatalf("the old subscriber received %d after %d messages: out of order", i, len(acked))
			}
			if i == crashAt {
				acked = append(acked, i) // held, not acked
				break
			}
			m.Ack()
			acked = append(acked, i)
		case <-ctx.Done():
			t.Fatalf("the old subscriber received %d messages, want %d", len(acked), crashAt+1)
		}
	}
	select {
	case err := <-published:
		t.Fatalf("the publisher finished (%v) before the crash: it was meant to be blocked on credit", err)
	default:
	}
	addr := old.Addr()
	watermill.Crash(old)
	if _, open := <-oldMsgs; open {
		t.Fatal("the old subscription's channel is open after the crash")
	}
	// Once the publisher's channel has noticed its connection is gone, no
	// acknowledgement can reach it: the first message it holds
	// unacknowledged is where the new node must start.
	var firstUnacked int
	for {
		cs := pub.Node().ChannelStats()
		if len(cs) != 1 {
			t.Fatalf("the publisher has %d channels, want 1", len(cs))
		}
		if !cs[0].Attached {
			firstUnacked = int(cs[0].Sent) - cs[0].Unacked
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the publisher's channel stayed attached after the crash")
		}
		time.Sleep(time.Millisecond)
	}

	var fresh *watermill.Subscriber
	for fresh == nil { // the address may take a moment to be free again
		if fresh, err = watermill.NewSubscriber(dir, watermill.WithListen(addr)); err != nil {
			if ctx.Err() != nil {
				t.Fatalf("restarting on %s: %v", addr, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	defer fresh.Close()
	freshMsgs, err := fresh.Subscribe(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for len(got) == 0 || got[len(got)-1] != n-1 {
		select {
		case m := <-freshMsgs:
			got = append(got, index(m))
			m.Ack()
		case <-ctx.Done():
			t.Fatalf("the new subscriber received %d messages, the last %v; want up to %d", len(got), got[max(0, len(got)-1):], n-1)
		}
	}
	if err := <-published; err != nil {
		t.Fatalf("publishing through the restart: %v", err)
	}

	first := got[0]
	want := make([]int, 0, n-first)
	for i := first; i < n; i++ {
		want = append(want, i)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("the new subscriber received %d messages from %d, not each of %d..%d once in order", len(got), first, first, n-1)
	}
	if first > crashAt {
		t.Fatalf("messages %d..%d are lost: acked by no one, redelivered to no one", crashAt, first-1)
	}
	if first != firstUnacked {
		t.Fatalf("the new subscriber started at %d, but the publisher held %d.. unacknowledged when the old one died", first, firstUnacked)
	}
	redelivered := crashAt - first // acked by the old subscriber, delivered again
	if redelivered >= window {
		t.Fatalf("%d messages acked by the old subscriber were delivered again, more than the %d the window lets the publisher hold", redelivered, window)
	}
	t.Logf("the new subscriber received %d..%d; %d of the %d messages the old one acked were delivered again (their acknowledgement had not reached the publisher)", first, n-1, redelivered, crashAt)

	select {
	case m := <-freshMsgs:
		t.Fatalf("message %d arrived after the last one", index(m))
	case <-time.After(100 * time.Millisecond):
	}
	var reconnects uint64
	for _, p := range pub.Node().Stats().Peers {
		if p.Addr == addr {
			reconnects = p.Reconnects
		}
	}
	if reconnects == 0 {
		t.Fatal("the publisher never reconnected: the crash did not break its connection")
	}
	if err := pub.Close(); err != nil {
		t.Fatal(err)
	}
}
