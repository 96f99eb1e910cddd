package watermill_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	wm "github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport"
	"github.com/sluicehq/sluice/watermill"
)

func newPublisher(t *testing.T, dir watermill.Directory, opts ...watermill.Option) *watermill.Publisher {
	t.Helper()
	p, err := watermill.NewPublisher(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

func newSubscriber(t *testing.T, dir watermill.Directory, opts ...watermill.Option) *watermill.Subscriber {
	t.Helper()
	s, err := watermill.NewSubscriber(dir, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func subscribe(t *testing.T, s *watermill.Subscriber, topic string) <-chan *message.Message {
	t.Helper()
	ch, err := s.Subscribe(context.Background(), topic)
	if err != nil {
		t.Fatal(err)
	}
	return ch
}

func numbered(i int) *message.Message {
	return message.NewMessage(wm.NewUUID(), []byte(strconv.Itoa(i)))
}

func withTimeout(m *message.Message, d time.Duration) (*message.Message, context.CancelFunc) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	m.SetContext(ctx)
	return m, cancel
}

// receive takes n messages from ch, acking each, and returns their payloads.
func receive(t *testing.T, ch <-chan *message.Message, n int) []string {
	t.Helper()
	var got []string
	for len(got) < n {
		select {
		case m, ok := <-ch:
			if !ok {
				t.Fatalf("the channel closed after %d of %d messages", len(got), n)
			}
			got = append(got, string(m.Payload))
			m.Ack()
		case <-time.After(10 * time.Second):
			t.Fatalf("received %d of %d messages", len(got), n)
		}
	}
	return got
}

func seq(from, to int) []string {
	var s []string
	for i := from; i < to; i++ {
		s = append(s, strconv.Itoa(i))
	}
	return s
}

// A subscriber that does not ack stops its publisher on Sluice's credit:
// with a window of 8 messages, the 9th Publish blocks until its context
// ends; once the subscriber has acked, it goes through.
func TestPublishBlocksOnCreditUntilTheSubscriberAcks(t *testing.T) {
	const window = 8
	dir := watermill.NewMemDirectory()
	sub := newSubscriber(t, dir)
	msgs := subscribe(t, sub, "credit")
	pub := newPublisher(t, dir, watermill.WithNodeOptions(transport.WithWindow(window, 1<<20)))
	for i := range window {
		if err := pub.Publish("credit", numbered(i)); err != nil {
			t.Fatal(err)
		}
	}
	m, cancel := withTimeout(numbered(window), 300*time.Millisecond)
	defer cancel()
	if err := pub.Publish("credit", m); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the publish past the window returned %v, want it blocked until its context's deadline", err)
	}
	cs := pub.Node().ChannelStats()
	if len(cs) != 1 || cs[0].Blocked == 0 || cs[0].Unacked != window {
		t.Fatalf("channel stats %+v: want one channel, %d unacknowledged, time spent blocked", cs, window)
	}
	if got := receive(t, msgs, window); !slices.Equal(got, seq(0, window)) {
		t.Fatalf("received %v", got)
	}
	if err := pub.Publish("credit", numbered(window)); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, msgs, 1); got[0] != strconv.Itoa(window) {
		t.Fatalf("received %v after the window freed, want %d", got, window)
	}
}

// Messages published before anyone subscribes wait in the backlog, which is
// bounded: past it Publish blocks until a subscription appears or its
// context ends. The first subscription gets the backlog in order.
func TestTheBacklogHoldsMessagesUntilASubscriptionAppears(t *testing.T) {
	dir := watermill.NewMemDirectory()
	pub := newPublisher(t, dir, watermill.WithBacklog(3, 1<<20))
	for i := range 3 {
		if err := pub.Publish("later", numbered(i)); err != nil {
			t.Fatal(err)
		}
	}
	m, cancel := withTimeout(numbered(3), 200*time.Millisecond)
	defer cancel()
	if err := pub.Publish("later", m); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a publish past the full backlog returned %v, want it blocked until its deadline", err)
	}
	blocked := make(chan error, 1)
	go func() { blocked <- pub.Publish("later", numbered(3)) }()
	sub := newSubscriber(t, dir)
	msgs := subscribe(t, sub, "later")
	if got := receive(t, msgs, 4); !slices.Equal(got, seq(0, 4)) {
		t.Fatalf("received %v, want the backlog then the blocked message, in order", got)
	}
	if err := <-blocked; err != nil {
		t.Fatal(err)
	}
}

func TestTheBacklogIsBoundedInBytes(t *testing.T) {
	dir := watermill.NewMemDirectory()
	// One encoded message of 100 payload bytes and a packed UUID is 118 bytes.
	pub := newPublisher(t, dir, watermill.WithBacklog(100, 200))
	big := func() *message.Message { return message.NewMessage(wm.NewUUID(), make([]byte, 100)) }
	if err := pub.Publish("bytes", big()); err != nil {
		t.Fatal(err)
	}
	m, cancel := withTimeout(big(), 200*time.Millisecond)
	defer cancel()
	if err := pub.Publish("bytes", m); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a second 118-byte message in a 200-byte backlog: %v, want it blocked", err)
	}
}

func TestPublisherCloseReportsMessagesNoSubscriptionTook(t *testing.T) {
	dir := watermill.NewMemDirectory()
	pub, err := watermill.NewPublisher(dir, watermill.WithCloseTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		if err := pub.Publish("nobody", numbered(i)); err != nil {
			t.Fatal(err)
		}
	}
	err = pub.Close()
	if !errors.Is(err, watermill.ErrUndelivered) {
		t.Fatalf("Close: %v, want ErrUndelivered", err)
	}
	if want := "2 kept because no subscription was announced"; !strings.Contains(err.Error(), want) {
		t.Fatalf("Close: %q does not say %q", err, want)
	}
	if err := pub.Publish("nobody", numbered(2)); !errors.Is(err, watermill.ErrClosed) {
		t.Fatalf("Publish after Close: %v, want ErrClosed", err)
	}
	if err := pub.Close(); err != nil {
		t.Fatalf("a second Close: %v", err)
	}
}

// Every Subscriber of a topic gets every message; the subscriptions of one
// Subscriber take turns, so between them each message arrives once.
func TestFanOutAcrossSubscribersTurnsWithinOne(t *testing.T) {
	const n = 200
	dir := watermill.NewMemDirectory()
	a, b := newSubscriber(t, dir), newSubscriber(t, dir)
	fromA := subscribe(t, a, "fan")
	b1, b2 := subscribe(t, b, "fan"), subscribe(t, b, "fan")
	pub := newPublisher(t, dir)
	for i := range n {
		if err := pub.Publish("fan", numbered(i)); err != nil {
			t.Fatal(err)
		}
	}
	if got := receive(t, fromA, n); !slices.Equal(got, seq(0, n)) {
		t.Fatalf("subscriber a received %d messages, not 0..%d in order", len(got), n-1)
	}
	var mu sync.Mutex
	var got []string
	var wg sync.WaitGroup
	done := make(chan struct{})
	for _, ch := range []<-chan *message.Message{b1, b2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case m := <-ch:
					mu.Lock()
					got = append(got, string(m.Payload))
					mu.Unlock()
					m.Ack()
				case <-done:
					return
				}
			}
		}()
	}
	deadline := time.After(10 * time.Second)
	for {
		mu.Lock()
		k := len(got)
		mu.Unlock()
		if k >= n {
			break
		}
		select {
		case <-deadline:
			t.Fatalf("subscriber b's two subscriptions received %d of %d", k, n)
		case <-time.After(5 * time.Millisecond):
		}
	}
	close(done)
	wg.Wait()
	if !slices.Equal(got, seq(0, n)) {
		t.Fatalf("subscriber b's subscriptions received %d messages, not each of 0..%d once, in order", len(got), n-1)
	}
}

// A Sluice message that is not an encoded Watermill message is dropped and
// counted; the messages after it arrive.
func TestSubscriberDropsWhatDoesNotDecode(t *testing.T) {
	dir := watermill.NewMemDirectory()
	sub := newSubscriber(t, dir)
	msgs := subscribe(t, sub, "raw")
	node, err := transport.NewNode()
	if err != nil {
		t.Fatal(err)
	}
	defer node.Abort()
	peer, err := node.Peer(sub.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := peer.OpenSender(ctx, taskid.ID{Processor: 7}, watermill.TopicTask("raw"))
	if err != nil {
		t.Fatal(err)
	}
	good := message.NewMessage(wm.NewUUID(), []byte("fine"))
	for _, p := range [][]byte{{0x80, 1, 2}, watermill.AppendMessage(nil, good)} {
		if err := s.Send(ctx, 0, p); err != nil {
			t.Fatal(err)
		}
	}
	if got := receive(t, msgs, 1); got[0] != "fine" {
		t.Fatalf("received %q", got)
	}
	if err := s.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if m := sub.Malformed(); m != 1 {
		t.Fatalf("Malformed() = %d, want 1", m)
	}
}

func TestSubscribeAfterCloseFails(t *testing.T) {
	sub, err := watermill.NewSubscriber(watermill.NewMemDirectory())
	if err != nil {
		t.Fatal(err)
	}
	msgs := subscribe(t, sub, "x")
	if err := sub.Close(); err != nil {
		t.Fatal(err)
	}
	if _, open := <-msgs; open {
		t.Fatal("a subscription's channel is open after Close")
	}
	if _, err := sub.Subscribe(context.Background(), "x"); !errors.Is(err, watermill.ErrClosed) {
		t.Fatalf("Subscribe after Close: %v, want ErrClosed", err)
	}
}

func TestMemDirectoryTellsWatchersEveryChangeInOrder(t *testing.T) {
	dir := watermill.NewMemDirectory()
	a := watermill.Endpoint{Addr: "a:1", Task: taskid.ID{Processor: 1}}
	b := watermill.Endpoint{Addr: "b:1", Task: taskid.ID{Processor: 2}}
	if err := dir.Announce("t", a); err != nil {
		t.Fatal(err)
	}
	var seen []string
	stop, err := dir.Watch("t", func(eps []watermill.Endpoint) { seen = append(seen, fmt.Sprint(eps)) })
	if err != nil {
		t.Fatal(err)
	}
	_ = dir.Announce("t", b)
	_ = dir.Announce("t", b)     // again: no change
	_ = dir.Announce("other", a) // another topic
	_ = dir.Withdraw("t", a)
	_ = dir.Withdraw("t", a) // again: no change
	stop()
	_ = dir.Withdraw("t", b) // after stop: not seen
	want := []string{
		fmt.Sprint([]watermill.Endpoint{a}),
		fmt.Sprint([]watermill.Endpoint{a, b}),
		fmt.Sprint([]watermill.Endpoint{b}),
	}
	if !slices.Equal(seen, want) {
		t.Fatalf("the watcher saw %v, want %v", seen, want)
	}
}

// Two topics of one Subscriber that map to the same task are refused: their
// messages would reach one handler.
func TestSubscribeRefusesTopicsThatCollide(t *testing.T) {
	watermill.MapTopicsTo(t, taskid.ID{Processor: 9, Index: 9})
	sub := newSubscriber(t, watermill.NewMemDirectory())
	subscribe(t, sub, "first")
	subscribe(t, sub, "first") // the same topic again is no collision
	_, err := sub.Subscribe(context.Background(), "second")
	if !errors.Is(err, watermill.ErrTopicCollision) || !strings.Contains(err.Error(), `"second" and "first"`) {
		t.Fatalf("Subscribe to a colliding topic: %v, want ErrTopicCollision naming both", err)
	}
}

// A subscription that starts and ends while the handler waits to offer a
// message on a snapshot without it still has its channel closed, and Close
// returns.
func TestSubscriptionEndingWhileHandlerOffersIsClosed(t *testing.T) {
	dir := watermill.NewMemDirectory()
	sub, err := watermill.NewSubscriber(dir)
	if err != nil {
		t.Fatal(err)
	}
	pub := newPublisher(t, dir)

	waiting := make(chan int, 1)
	lateCtx, endLate := context.WithCancel(context.Background())
	var (
		once     sync.Once
		late     = make(chan (<-chan *message.Message), 1)
		lateOpen = make(chan bool, 1)
	)
	watermill.HookOffer(t, func(n int) {
		select {
		case waiting <- n:
		default:
		}
	}, func() {
		// The handler woke because the late subscription started; it ends
		// before the handler looks at the subscriptions again.
		once.Do(func() {
			endLate()
			select {
			case <-drained(<-late):
				lateOpen <- false
			case <-time.After(10 * time.Second): // hang guard
				lateOpen <- true
			}
		})
	})

	ctx, cancel := context.WithCancel(context.Background())
	first, err := sub.Subscribe(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	for range first {
	}
	if err := pub.Publish("t", numbered(0)); err != nil {
		t.Fatal(err)
	}
	if n := <-waiting; n != 0 {
		t.Fatalf("the handler waits on %d subscriptions, want 0", n)
	}
	ch, err := sub.Subscribe(lateCtx, "t")
	if err != nil {
		t.Fatal(err)
	}
	late <- ch
	if <-lateOpen {
		t.Fatal("the channel of a subscription whose context ended is not closed")
	}
	closed := make(chan error, 1)
	go func() { closed <- sub.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second): // hang guard
		t.Fatal("Subscriber.Close does not return")
	}
}

// drained is closed once ch is closed, its messages nacked.
func drained(ch <-chan *message.Message) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		for m := range ch {
			m.Nack()
		}
		close(done)
	}()
	return done
}

// failingDirectory is a MemDirectory whose next Announce fails.
type failingDirectory struct {
	*watermill.MemDirectory
	fail bool
}

var errAnnounce = errors.New("directory unavailable")

func (d *failingDirectory) Announce(topic string, ep watermill.Endpoint) error {
	if d.fail {
		d.fail = false
		return errAnnounce
	}
	return d.MemDirectory.Announce(topic, ep)
}

// A Subscribe whose announcement failed returns the error, and the next
// Subscribe to the topic announces it again and receives its messages.
func TestSubscribeAfterFailedAnnounceAnnouncesAgain(t *testing.T) {
	dir := &failingDirectory{MemDirectory: watermill.NewMemDirectory(), fail: true}
	sub := newSubscriber(t, dir)
	if _, err := sub.Subscribe(context.Background(), "t"); !errors.Is(err, errAnnounce) {
		t.Fatalf("Subscribe = %v, want the directory's error", err)
	}
	msgs := subscribe(t, sub, "t")
	pub := newPublisher(t, dir)
	if err := pub.Publish("t", numbered(1)); err != nil {
		t.Fatal(err)
	}
	select {
	case m := <-msgs:
		m.Ack()
		if string(m.Payload) != "1" {
			t.Fatalf("got %q, want 1", m.Payload)
		}
	case <-time.After(10 * time.Second): // hang guard
		t.Fatal("the subscription receives nothing: the topic was not announced again")
	}
}

// A Publish that found its topic before Close and reaches it after Close
// fails with ErrClosed rather than keeping the message where nothing will
// send it.
func TestPublishOvertakenByCloseFails(t *testing.T) {
	pub, err := watermill.NewPublisher(watermill.NewMemDirectory())
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("t", numbered(0)); err != nil { // the route exists
		t.Fatal(err)
	}
	routed, proceed := make(chan struct{}), make(chan struct{})
	watermill.HookRouted(t, func() {
		close(routed)
		<-proceed
	})
	published := make(chan error, 1)
	go func() { published <- pub.Publish("t", numbered(1)) }()
	<-routed
	if err := pub.Close(); !errors.Is(err, watermill.ErrUndelivered) {
		t.Fatalf("Close = %v, want ErrUndelivered for the first message", err)
	}
	close(proceed)
	if err := <-published; !errors.Is(err, watermill.ErrClosed) {
		t.Fatalf("Publish overtaken by Close = %v, want ErrClosed", err)
	}
}

// A message larger than a channel's window can hold is refused at Publish,
// with no subscriber as with one: kept in the topic's backlog, it would
// block every later message of the topic once a subscriber came.
func TestAMessageNoWindowHoldsIsRefusedAndDoesNotBlockTheTopic(t *testing.T) {
	dir := watermill.NewMemDirectory()
	pub := newPublisher(t, dir)
	huge := message.NewMessage(wm.NewUUID(), make([]byte, pub.Node().MaxPayload()))
	if err := pub.Publish("t", huge); !errors.Is(err, transport.ErrTooLarge) {
		t.Fatalf("Publish of a message no window holds = %v, want ErrTooLarge", err)
	}
	if err := pub.Publish("t", numbered(1)); err != nil {
		t.Fatal(err)
	}
	msgs := subscribe(t, newSubscriber(t, dir), "t")
	if got := receive(t, msgs, 1); got[0] != "1" {
		t.Fatalf("got %q, want the message published after the refused one", got)
	}
}

// peers is how many subscriber nodes pub's node keeps a peer for (and
// dials while they are down).
func peers(pub *watermill.Publisher) int { return len(pub.Node().Stats().Peers) }

// The publisher keeps a peer for a subscriber's address while a topic it
// publishes to has a subscription there, and closes it when the last one
// is withdrawn: subscribers that come and go leave no peer behind, and
// one that announces again is reached again.
func TestThePublisherClosesThePeersOfSubscribersThatLeft(t *testing.T) {
	dir := watermill.NewMemDirectory()
	pub := newPublisher(t, dir)
	for i := range 5 {
		sub, err := watermill.NewSubscriber(dir)
		if err != nil {
			t.Fatal(err)
		}
		msgs := subscribe(t, sub, "come-and-go")
		if err := pub.Publish("come-and-go", numbered(i)); err != nil {
			t.Fatal(err)
		}
		if got := receive(t, msgs, 1); got[0] != strconv.Itoa(i) {
			t.Fatalf("subscriber %d received %v", i, got)
		}
		if n := peers(pub); n != 1 {
			t.Fatalf("with subscriber %d up, the publisher has %d peers, want 1", i, n)
		}
		if err := sub.Close(); err != nil {
			t.Fatal(err)
		}
		if n := peers(pub); n != 0 {
			t.Fatalf("after subscriber %d left, the publisher has %d peers, want 0", i, n)
		}
	}

	// Two topics at one subscriber share its peer until both are gone.
	sub := newSubscriber(t, dir)
	a, b := subscribe(t, sub, "a"), subscribe(t, sub, "b")
	for _, topic := range []string{"a", "b"} {
		if err := pub.Publish(topic, numbered(0)); err != nil {
			t.Fatal(err)
		}
	}
	receive(t, a, 1)
	receive(t, b, 1)
	epA := watermill.Endpoint{Addr: sub.Addr(), Task: watermill.TopicTask("a")}
	epB := watermill.Endpoint{Addr: sub.Addr(), Task: watermill.TopicTask("b")}
	if err := dir.Withdraw("a", epA); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("b", numbered(1)); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, b, 1); got[0] != "1" || peers(pub) != 1 {
		t.Fatalf("with topic a withdrawn, b received %v and the publisher has %d peers; want 1 and one peer", got, peers(pub))
	}
	if err := dir.Withdraw("b", epB); err != nil {
		t.Fatal(err)
	}
	if n := peers(pub); n != 0 {
		t.Fatalf("with both topics withdrawn the publisher has %d peers, want 0", n)
	}
	// Announced again, the same subscriber, still up, is dialed again and
	// its channel goes on where it stopped.
	if err := dir.Announce("a", epA); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("a", numbered(2)); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, a, 1); got[0] != "2" {
		t.Fatalf("topic a announced again received %v, want 2", got)
	}
}

// batchDirectory is a Directory whose watchers learn of announcements
// only when release tells them, all in one change, in the order they were
// made.
type batchDirectory struct {
	mu      sync.Mutex
	held    map[string][]watermill.Endpoint
	known   map[string][]watermill.Endpoint
	watches map[string]func([]watermill.Endpoint)
}

func newBatchDirectory() *batchDirectory {
	return &batchDirectory{
		held:    map[string][]watermill.Endpoint{},
		known:   map[string][]watermill.Endpoint{},
		watches: map[string]func([]watermill.Endpoint){},
	}
}

func (d *batchDirectory) Announce(topic string, ep watermill.Endpoint) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.held[topic] = append(d.held[topic], ep)
	return nil
}

func (d *batchDirectory) Withdraw(topic string, ep watermill.Endpoint) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.held[topic] = slices.DeleteFunc(d.held[topic], func(e watermill.Endpoint) bool { return e == ep })
	if i := slices.Index(d.known[topic], ep); i >= 0 {
		d.known[topic] = slices.Delete(slices.Clone(d.known[topic]), i, i+1)
		d.notifyLocked(topic)
	}
	return nil
}

// Watch takes one watcher a topic, the publisher's.
func (d *batchDirectory) Watch(topic string, fn func([]watermill.Endpoint)) (func(), error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.watches[topic] = fn
	d.notifyLocked(topic)
	return func() {
		d.mu.Lock()
		delete(d.watches, topic)
		d.mu.Unlock()
	}, nil
}

// release makes topic's held announcements known, in one change.
func (d *batchDirectory) release(topic string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.known[topic] = append(slices.Clone(d.known[topic]), d.held[topic]...)
	d.held[topic] = nil
	d.notifyLocked(topic)
}

func (d *batchDirectory) notifyLocked(topic string) {
	if fn := d.watches[topic]; fn != nil {
		fn(slices.Clone(d.known[topic]))
	}
}

// A Publish that flushes the backlog and gives up half-way through a
// message (its context ends while one subscription has no credit) leaves
// that message to be sent to the subscriptions that did not take it, and
// only to them: none receives a message of the backlog twice.
func TestABacklogMessageSomeSubscriptionsTookIsNotSentToThemAgain(t *testing.T) {
	dir := newBatchDirectory()
	pub := newPublisher(t, dir, watermill.WithBacklog(2, 1<<20),
		watermill.WithNodeOptions(transport.WithWindow(1, 1<<20)))
	for i := range 2 {
		if err := pub.Publish("t", numbered(i)); err != nil {
			t.Fatal(err)
		}
	}
	full := make(chan struct{}, 1)
	watermill.HookBacklogFull(t, func() {
		select {
		case full <- struct{}{}:
		default:
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := numbered(2)
	m.SetContext(ctx)
	published := make(chan error, 1)
	go func() { published <- pub.Publish("t", m) }()
	<-full // it holds the topic, waiting for room in the backlog

	a, b := newSubscriber(t, dir), newSubscriber(t, dir)
	fromA, fromB := subscribe(t, a, "t"), subscribe(t, b, "t")
	dir.release("t") // a, then b, in one change
	// The waiting Publish flushes the backlog: message 0 to a and b, then
	// message 1 to a, which acks 0, and to b, which holds 0 unacked: with
	// a window of one message, the Publish waits for b's credit.
	if got := receive(t, fromA, 2); !slices.Equal(got, seq(0, 2)) {
		t.Fatalf("a received %v, want the backlog", got)
	}
	var held *message.Message
	select {
	case held = <-fromB:
	case <-time.After(10 * time.Second): // hang guard
		t.Fatal("b received nothing")
	}
	if string(held.Payload) != "0" {
		t.Fatalf("b received %q first, want 0", held.Payload)
	}
	cancel()
	if err := <-published; !errors.Is(err, context.Canceled) {
		t.Fatalf("the Publish whose context ended = %v, want context.Canceled", err)
	}
	held.Ack()
	if got := receive(t, fromB, 1); got[0] != "1" {
		t.Fatalf("b received %v after 0, want 1", got)
	}
	// Sent in the background: before a's window has room for it, a must
	// ack what it received after the backlog, if anything.
	go func() { published <- pub.Publish("t", numbered(3)) }()
	if got := receive(t, fromA, 1); got[0] != "3" {
		t.Fatalf("a received %v after the backlog, want 3: a backlog message went to it twice", got)
	}
	if got := receive(t, fromB, 1); got[0] != "3" {
		t.Fatalf("b received %v, want 3", got)
	}
	if err := <-published; err != nil {
		t.Fatal(err)
	}
}

// A Publish waiting behind the topic's sending under way (here the backlog,
// which waits for credit: the subscription holds a message unacked) gives
// up when its message's context ends, with the context's error; the topic
// works on afterwards.
func TestAPublishWaitingForItsTopicGivesUpWhenItsContextEnds(t *testing.T) {
	dir := watermill.NewMemDirectory()
	pub := newPublisher(t, dir, watermill.WithNodeOptions(transport.WithWindow(1, 1<<20)))
	for i := range 2 {
		if err := pub.Publish("t", numbered(i)); err != nil { // into the backlog
			t.Fatal(err)
		}
	}
	msgs := subscribe(t, newSubscriber(t, dir), "t")
	// The backlog is being sent: message 0 came, and message 1 waits for
	// the credit that only an ack of 0 gives, holding the topic.
	var held *message.Message
	select {
	case held = <-msgs:
	case <-time.After(10 * time.Second): // hang guard
		t.Fatal("the subscription received nothing")
	}
	routed := make(chan struct{}, 1)
	watermill.HookRouted(t, func() {
		select {
		case routed <- struct{}{}:
		default:
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	m := numbered(2)
	m.SetContext(ctx)
	published := make(chan error, 1)
	go func() { published <- pub.Publish("t", m) }()
	<-routed
	cancel()
	select {
	case err := <-published:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("a Publish waiting for its topic, its context cancelled: %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second): // hang guard
		t.Fatal("a Publish waiting for its topic does not return when its context is cancelled")
	}
	held.Ack()
	if got := receive(t, msgs, 1); got[0] != "1" {
		t.Fatalf("received %v after 0, want 1", got)
	}
	if err := pub.Publish("t", numbered(3)); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, msgs, 1); got[0] != "3" {
		t.Fatalf("received %v after 1, want 3", got)
	}
}

// A Publish that sent its message to one subscription and then gave up
// waiting for another's credit fails; the caller's retry of the same
// message (its UUID) goes to the other subscription only, and the topic's
// next message to both.
func TestARetriedMessageGoesOnlyToTheSubscriptionsThatMissedIt(t *testing.T) {
	dir := newBatchDirectory()
	pub := newPublisher(t, dir, watermill.WithNodeOptions(transport.WithWindow(1, 1<<20)))
	a, b := newSubscriber(t, dir), newSubscriber(t, dir)
	fromA, fromB := subscribe(t, a, "t"), subscribe(t, b, "t")
	dir.release("t") // a, then b: the order Publish sends in
	if err := pub.Publish("t", numbered(0)); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, fromA, 1); got[0] != "0" {
		t.Fatalf("a received %v, want 0", got)
	}
	var held *message.Message // b holds 0 unacked: its window of one is full
	select {
	case held = <-fromB:
	case <-time.After(10 * time.Second): // hang guard
		t.Fatal("b received nothing")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m := numbered(1)
	m.SetContext(ctx)
	published := make(chan error, 1)
	go func() { published <- pub.Publish("t", m) }()
	if got := receive(t, fromA, 1); got[0] != "1" {
		t.Fatalf("a received %v, want 1", got)
	}
	cancel() // it waits for b's credit
	if err := <-published; !errors.Is(err, context.Canceled) {
		t.Fatalf("the Publish waiting for b's credit = %v, want context.Canceled", err)
	}
	held.Ack()
	retry := message.NewMessage(m.UUID, m.Payload)
	if err := pub.Publish("t", retry); err != nil {
		t.Fatalf("the retry: %v", err)
	}
	if got := receive(t, fromB, 1); got[0] != "1" {
		t.Fatalf("b received %v, want 1", got)
	}
	// In the background: had the retry gone to a again, a's window would
	// hold it, and this Publish wait for a's credit.
	go func() { published <- pub.Publish("t", numbered(2)) }()
	if got := receive(t, fromA, 1); got[0] != "2" {
		t.Fatalf("a received %v after 1, want 2: the retry went to a again", got)
	}
	if got := receive(t, fromB, 1); got[0] != "2" {
		t.Fatalf("b received %v, want 2", got)
	}
	if err := <-published; err != nil {
		t.Fatal(err)
	}
}

// A subscription whose channel fails for good holds up no other: here its
// node dies and another, with another key, takes its address, and refuses
// the publisher. The subscription beside it receives every message, the
// Publish that found the failure says so once, and the ones after it go
// through.
func TestASubscriptionThatFailedForGoodHoldsUpNoOther(t *testing.T) {
	dir := newBatchDirectory()
	key := []byte("the publisher's key, 32 bytes...")
	pub := newPublisher(t, dir, watermill.WithNodeOptions(transport.WithKey(key)))
	gone := newSubscriber(t, dir, watermill.WithNodeOptions(transport.WithKey(key)))
	subscribe(t, gone, "t")
	good := newSubscriber(t, dir, watermill.WithNodeOptions(transport.WithKey(key)))
	fromGood := subscribe(t, good, "t")
	dir.release("t") // the failing subscription first: the order Publish sends in
	if err := pub.Publish("t", numbered(0)); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, fromGood, 1); got[0] != "0" {
		t.Fatalf("received %v, want 0", got)
	}
	addr := gone.Addr()
	gone.Node().Abort() // still announced
	other := newSubscriber(t, dir, watermill.WithListen(addr),
		watermill.WithNodeOptions(transport.WithKey([]byte("another key of 32 bytes, refused"))))
	fromOther := subscribe(t, other, "u") // a topic of its own: it listens, and refuses the publisher
	peer, err := pub.Node().Peer(addr)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang guard
	defer cancel()
	for peer.Err() == nil { // until the publisher has redialed, and been refused
		if ctx.Err() != nil {
			t.Fatal("the node at the failed subscription's address never refused the publisher")
		}
		time.Sleep(time.Millisecond)
	}
	if err := peer.Err(); !errors.Is(err, transport.ErrRejected) {
		t.Fatalf("the node at the failed subscription's address: %v, want its refusal", err)
	}
	var failed []error
	for i := 1; i <= 3; i++ {
		m, cancel := withTimeout(numbered(i), time.Minute) // a hang guard
		if err := pub.Publish("t", m); err != nil {
			failed = append(failed, err)
		}
		cancel()
	}
	if got := receive(t, fromGood, 3); !slices.Equal(got, seq(1, 4)) {
		t.Fatalf("the good subscription received %v, want 1, 2 and 3", got)
	}
	if len(failed) != 1 || !errors.Is(failed[0], transport.ErrRejected) || !strings.Contains(failed[0].Error(), addr) {
		t.Fatalf("Publish failed %d times: %v; want once, with the refusal at %s", len(failed), failed, addr)
	}
	select {
	case m := <-fromOther:
		t.Fatalf("the refusing node received %q", m.Payload)
	default:
	}
}

// A subscription out of credit does not keep a message from the one after
// it: the Publish that waited on it until its context ended fails, having
// given the message to the other, and its retry goes to the first only.
func TestASubscriptionOutOfCreditHoldsUpNoOther(t *testing.T) {
	dir := newBatchDirectory()
	pub := newPublisher(t, dir, watermill.WithNodeOptions(transport.WithWindow(1, 1<<20)))
	held, free := newSubscriber(t, dir), newSubscriber(t, dir)
	fromHeld, fromFree := subscribe(t, held, "t"), subscribe(t, free, "t")
	dir.release("t") // held first: the order Publish sends in
	if err := pub.Publish("t", numbered(0)); err != nil {
		t.Fatal(err)
	}
	if got := receive(t, fromFree, 1); got[0] != "0" {
		t.Fatalf("received %v, want 0", got)
	}
	var unacked *message.Message // its window of one stays full
	select {
	case unacked = <-fromHeld:
	case <-time.After(10 * time.Second): // hang guard
		t.Fatal("the held subscription received nothing")
	}
	// Until free's ack of 0 reaches the publisher, free has no credit
	// either.
	guard := time.Now().Add(30 * time.Second)
	for !ackedAll(pub, free.Addr()) {
		if time.Now().After(guard) {
			t.Fatal("the publisher never had free's ack of 0")
		}
		time.Sleep(time.Millisecond)
	}
	m, cancel := withTimeout(numbered(1), 50*time.Millisecond) // it waits on held until then
	defer cancel()
	if err := pub.Publish("t", m); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the Publish waiting for held's credit = %v, want context.DeadlineExceeded", err)
	}
	if got := receive(t, fromFree, 1); got[0] != "1" {
		t.Fatalf("free received %v, want 1", got)
	}
	unacked.Ack()
	if err := pub.Publish("t", message.NewMessage(m.UUID, m.Payload)); err != nil { // the retry
		t.Fatal(err)
	}
	if got := receive(t, fromHeld, 1); got[0] != "1" {
		t.Fatalf("held received %v, want 1", got)
	}
	published := make(chan error, 1)
	go func() { published <- pub.Publish("t", numbered(2)) }()
	if got := receive(t, fromFree, 1); got[0] != "2" {
		t.Fatalf("free received %v after 1, want 2: the retry went to it again", got)
	}
	if err := <-published; err != nil {
		t.Fatal(err)
	}
}

// ackedAll reports whether pub's channels to addr have nothing unacked.
func ackedAll(pub *watermill.Publisher, addr string) bool {
	for _, c := range pub.Node().ChannelStats() {
		if c.Peer == addr && c.Unacked > 0 {
			return false
		}
	}
	return true
}

// A subscription whose context ends while its application holds a message
// still holds it: the application acks it afterwards (as a Watermill
// Router finishes its handler after the router's context ended), and the
// next subscription gets the next message, not the acked one again.
func TestAMessageAckedAfterItsSubscriptionEndedIsNotDeliveredAgain(t *testing.T) {
	// Once the subscription has ended, the handler offering a message to
	// no subscription at all means it gave up on the held one. Hooked
	// before the Subscriber starts, so that its handler never races the
	// hook, and reset after it closes.
	var ended sync.Once
	endedNow := make(chan struct{})
	reoffered := make(chan struct{}, 1)
	watermill.HookOffer(t, func(n int) {
		select {
		case <-endedNow:
			if n == 0 {
				select {
				case reoffered <- struct{}{}:
				default:
				}
			}
		default:
		}
	}, nil)
	dir := watermill.NewMemDirectory()
	sub := newSubscriber(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first, held := holdFirst(t, ctx, sub, dir)
	cancel()
	for range first {
	}
	ended.Do(func() { close(endedNow) })
	select {
	case <-reoffered:
	case <-time.After(time.Second): // it keeps waiting for the Ack
	}
	held.Ack()
	next := subscribe(t, sub, "t")
	if got := receive(t, next, 1); got[0] != "1" {
		t.Fatalf("after message %s was acked, the next subscription received %s: delivered twice", held.Payload, got[0])
	}
}

// stopHookDirectory is a MemDirectory that calls beforeStop when a watch
// is stopped, before it stops: what happens in a directory that learns of
// an announcement while a publisher closes.
type stopHookDirectory struct {
	*watermill.MemDirectory
	beforeStop func()
}

func (d *stopHookDirectory) Watch(topic string, fn func([]watermill.Endpoint)) (func(), error) {
	stop, err := d.MemDirectory.Watch(topic, fn)
	if err != nil {
		return nil, err
	}
	return func() {
		if d.beforeStop != nil {
			d.beforeStop()
		}
		stop()
	}, nil
}

// A message Publisher.Close reports undelivered (kept in the backlog, no
// subscription announced) is not delivered after all by a subscription
// announced while Close finishes with the topic: the caller would publish
// it again.
func TestAMessageCloseReportsUndeliveredIsNotSentAfterwards(t *testing.T) {
	dir := &stopHookDirectory{MemDirectory: watermill.NewMemDirectory()}
	pub, err := watermill.NewPublisher(dir, watermill.WithCloseTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish("t", numbered(0)); err != nil { // into the backlog
		t.Fatal(err)
	}
	sub := newSubscriber(t, dir)
	received := make(chan string, 1)
	dir.beforeStop = func() {
		// Close has counted the backlog; a subscription appears.
		msgs := subscribe(t, sub, "t")
		select {
		case m := <-msgs:
			m.Ack()
			received <- string(m.Payload)
		case <-time.After(time.Second): // not sent: as it should be
		}
	}
	err = pub.Close()
	if !errors.Is(err, watermill.ErrUndelivered) {
		t.Fatalf("Close = %v, want ErrUndelivered for the message kept in the backlog", err)
	}
	select {
	case p := <-received:
		t.Fatalf("Close reported message %s undelivered (%v), but a subscription received it", p, err)
	default:
	}
}

// A subscription whose context ends just as it takes a message (the
// handler has not yet seen that it took it) has its channel closed at
// once, though the message it holds is not acked yet: a reader that waits
// for the channel to close before acking what it holds is not kept
// waiting.
func TestASubscriptionEndingAsItTakesAMessageIsClosedBeforeTheAck(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var once sync.Once
	watermill.HookOffer(t, func(int) {}, func() {
		// The offer's select has sent the message; the subscription
		// ends before the handler counts the offer done.
		once.Do(func() {
			cancel()
			time.Sleep(100 * time.Millisecond)
		})
	})
	dir := watermill.NewMemDirectory()
	sub := newSubscriber(t, dir)
	first, held := holdFirst(t, ctx, sub, dir)
	select {
	case <-drained(first):
	case <-time.After(5 * time.Second):
		t.Fatal("the channel of a subscription whose context ended stays open while it holds a message unacked")
	}
	held.Ack()
	if got := receive(t, subscribe(t, sub, "t"), 1); got[0] != "1" {
		t.Fatalf("after message %s was acked, the next subscription received %s", held.Payload, got[0])
	}
}

// holdFirst subscribes sub to topic "t" with ctx, publishes messages 0 and
// 1 to it from a new Publisher of dir, and returns the subscription and
// its first message, received and neither acked nor nacked.
func holdFirst(t *testing.T, ctx context.Context, sub *watermill.Subscriber, dir watermill.Directory) (<-chan *message.Message, *message.Message) {
	t.Helper()
	first, err := sub.Subscribe(ctx, "t")
	if err != nil {
		t.Fatal(err)
	}
	pub := newPublisher(t, dir)
	if err := pub.Publish("t", numbered(0), numbered(1)); err != nil {
		t.Fatal(err)
	}
	select {
	case held := <-first:
		return first, held
	case <-time.After(10 * time.Second): // hang guard
		t.Fatal("the subscription received nothing")
		return nil, nil
	}
}
