package watermill

import (
	"context"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport"
)

// Subscriber is a Watermill message.Subscriber on a listening Sluice node
// of its own. Its first Subscribe to a topic registers the handler of the
// topic's task (TopicTask) on the node and announces the topic's Endpoint
// in the Directory; Close withdraws it. Between subscriptions the topic
// stays announced, and messages wait in the node, bounded by the
// publishers' windows.
//
// The subscriptions of one topic on one Subscriber compete: each message
// goes to one of them, the first ready to receive it. Every Subscriber of a
// topic gets every message (fan-out). A message is delivered to a
// subscription and the next one only once it is acked; a Nack offers it
// again. A subscription that ends holding a message (its context ended)
// still holds it: the topic's next message waits for its Ack or Nack, or
// for Close. The node counts a run of messages consumed, and lets its
// publisher's window advance, only when all of them are acked. Safe for concurrent use.
type Subscriber struct {
	node *transport.Node
	dir  Directory
	o    options
	addr string

	ctx      context.Context // the base of every message's context; ends at Close
	cancel   context.CancelFunc
	closing  chan struct{}   // ends the subscriptions, after the node has stopped
	stopping <-chan struct{} // the node's Stopping: handlers return

	malformed atomic.Uint64
	open      sync.WaitGroup // subscriptions whose channel is not closed yet

	mu struct {
		sync.Mutex
		closed bool
		topics map[string]*topic
		tasks  map[taskid.ID]string
	}
}

// topic is one topic of a Subscriber: its subscriptions, and the handler of
// its task, which delivers each message of the runs the node hands it.
type topic struct {
	s    *Subscriber
	name string
	ep   Endpoint

	mu struct {
		sync.Mutex
		subs    []*subscription
		changed chan struct{} // closed and replaced when subs change
	}
}

// Test hooks: called by offer, without t.mu, before it waits on a snapshot
// of n subscriptions and after the wait ends.
var (
	testHookOfferWaits func(n int)
	testHookOfferWoke  func()
)

type subscription struct {
	out    chan *message.Message
	ended  bool // under topic.mu: removed from subs
	closed bool // under topic.mu: out closed
	// offers, under topic.mu, counts the waits of the handler (the node
	// runs it one run at a time) in a select that may send on out: sub is
	// in its snapshot of subs. Meanwhile out cannot be closed, and the
	// handler closes it after the wait if sub has ended. A subscription
	// that starts and ends during a wait is in no snapshot: end closes it.
	offers int
}

// NewSubscriber starts a Subscriber and its node, listening on WithListen's
// address.
func NewSubscriber(dir Directory, opts ...Option) (*Subscriber, error) {
	o := newOptions(opts)
	node, err := transport.NewNode(append(append([]transport.Option(nil), o.node...), transport.WithListen(o.listen))...)
	if err != nil {
		return nil, err
	}
	s := &Subscriber{node: node, dir: dir, o: o, addr: o.advertise, closing: make(chan struct{}), stopping: node.Stopping()}
	if s.addr == "" {
		s.addr = node.Addr()
	}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.mu.topics = make(map[string]*topic)
	s.mu.tasks = make(map[taskid.ID]string)
	return s, nil
}

// Node is the subscriber's Sluice node, for its statistics.
func (s *Subscriber) Node() *transport.Node { return s.node }

// Addr is the address the subscriber announces.
func (s *Subscriber) Addr() string { return s.addr }

// Malformed counts the messages dropped because they did not decode.
func (s *Subscriber) Malformed() uint64 { return s.malformed.Load() }

// Subscribe returns a channel of topic's messages, closed when ctx ends or
// the Subscriber closes. Each message must be acked or nacked before the
// subscription receives another.
func (s *Subscriber) Subscribe(ctx context.Context, name string) (<-chan *message.Message, error) {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	t := s.mu.topics[name]
	if t == nil {
		task := topicTask(name)
		if other, ok := s.mu.tasks[task]; ok {
			s.mu.Unlock()
			return nil, fmt.Errorf("%w: %q and %q (task %v)", ErrTopicCollision, name, other, task)
		}
		t = &topic{s: s, name: name, ep: Endpoint{Addr: s.addr, Task: task}}
		t.mu.changed = make(chan struct{})
		// Announced under s.mu, so that Close, which withdraws under it
		// too, cannot withdraw before this announcement; and before the
		// topic is registered, so that a failed announcement leaves
		// nothing behind and the next Subscribe tries again. Messages that
		// arrive before the handler is registered wait in the node.
		if err := s.dir.Announce(name, t.ep); err != nil {
			s.mu.Unlock()
			return nil, fmt.Errorf("watermill: announcing topic %q: %w", name, err)
		}
		if err := s.node.Handle(task, t.handle); err != nil {
			_ = s.dir.Withdraw(name, t.ep)
			s.mu.Unlock()
			return nil, err
		}
		s.mu.topics[name] = t
		s.mu.tasks[task] = name
	}
	sub := &subscription{out: make(chan *message.Message)}
	s.open.Add(1)
	t.mu.Lock()
	t.mu.subs = append(t.mu.subs, sub)
	t.changedLocked()
	t.mu.Unlock()
	s.mu.Unlock()
	go func() {
		select {
		case <-ctx.Done():
		case <-s.closing:
		}
		t.end(sub)
	}()
	return sub.out, nil
}

func (t *topic) changedLocked() {
	close(t.mu.changed)
	t.mu.changed = make(chan struct{})
}

// end removes sub and closes its channel, unless a handler may be sending
// on it (sub.offers), in which case that handler closes it.
func (t *topic) end(sub *subscription) {
	t.mu.Lock()
	defer t.mu.Unlock()
	sub.ended = true
	for i, x := range t.mu.subs {
		if x == sub {
			t.mu.subs = append(t.mu.subs[:i:i], t.mu.subs[i+1:]...)
			break
		}
	}
	t.changedLocked()
	if sub.offers == 0 {
		t.closeLocked(sub)
	}
}

// closeLocked closes the channel of sub, which has ended, once.
func (t *topic) closeLocked(sub *subscription) {
	if sub.closed {
		return
	}
	sub.closed = true
	close(sub.out)
	t.s.open.Done()
}

// handle is the Sluice handler of the topic's task. It returns, and the
// node counts the run consumed, once every message of the run is acked,
// or at once when the Subscriber closes (its node is closed by then, so
// nothing is acknowledged to the publisher).
func (t *topic) handle(_ taskid.Channel, _ uint64, msgs []transport.Message) {
	for _, m := range msgs {
		msg, err := DecodeMessage(m.Payload)
		if err != nil {
			t.s.malformed.Add(1)
			t.s.o.log.Error("watermill: dropping a message that does not decode", "topic", t.name, "err", err)
			continue
		}
		if !t.deliver(msg) {
			return
		}
	}
}

// deliver offers msg to the subscriptions until one acks it. It reports
// false if the Subscriber closed first.
func (t *topic) deliver(orig *message.Message) bool {
	for {
		msg := orig.Copy()
		ctx, cancel := context.WithCancel(t.s.ctx)
		msg.SetContext(ctx)
		sub, ok := t.offer(msg)
		if !ok {
			cancel()
			return false
		}
		acked, ok := t.await(msg, sub)
		cancel()
		if !ok {
			return false
		}
		if acked {
			return true
		}
	}
}

// offer sends msg on the channel of the first subscription ready to receive
// it, waiting for one if there is none.
func (t *topic) offer(msg *message.Message) (*subscription, bool) {
	var cases []reflect.SelectCase
	for {
		t.mu.Lock()
		subs, changed := t.mu.subs, t.mu.changed
		for _, sub := range subs {
			sub.offers++
		}
		t.mu.Unlock()
		if testHookOfferWaits != nil {
			testHookOfferWaits(len(subs))
		}
		var took *subscription
		switch len(subs) {
		case 0:
			select {
			case <-changed:
			case <-t.s.stopping:
			}
		case 1:
			select {
			case subs[0].out <- msg:
				took = subs[0]
			case <-changed:
			case <-t.s.stopping:
			}
		default:
			cases = cases[:0]
			for _, sub := range subs {
				cases = append(cases, reflect.SelectCase{Dir: reflect.SelectSend, Chan: reflect.ValueOf(sub.out), Send: reflect.ValueOf(msg)})
			}
			cases = append(cases,
				reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(changed)},
				reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(t.s.stopping)})
			if i, _, _ := reflect.Select(cases); i < len(subs) {
				took = subs[i]
			}
		}
		if testHookOfferWoke != nil {
			testHookOfferWoke()
		}
		t.mu.Lock()
		for _, sub := range subs {
			sub.offers--
			if sub.ended && sub != took && sub.offers == 0 {
				t.closeLocked(sub)
			}
		}
		t.mu.Unlock()
		if took != nil {
			return took, true
		}
		select {
		case <-t.s.stopping:
			return nil, false
		default:
		}
	}
}

// await waits for msg to be acked or nacked by sub. It reports false if
// the Subscriber closed first. A subscription that ends holding msg still
// holds it: its application may ack it yet (a Watermill Router finishing
// its handler after its context ended does), so msg is offered again only
// if it is nacked; offered again at the end, it would be delivered twice
// once acked. The channel of sub is closed as soon as sub ends, all the
// same: a channel that closed only after the Ack would keep a reader that
// waits for the close before acking waiting for ever.
//
// Of a sub that ends during await, end closes the channel (no offer is
// under way); one that ended while the offer that gave it msg was under
// way is closed here.
func (t *topic) await(msg *message.Message, sub *subscription) (acked, ok bool) {
	for {
		t.mu.Lock()
		changed := t.mu.changed
		if sub.ended {
			t.closeLocked(sub)
			changed = nil // nothing more to learn from changes
		}
		t.mu.Unlock()
		select {
		case <-msg.Acked():
			return true, true
		case <-msg.Nacked():
			return false, true
		case <-changed:
		case <-t.s.stopping:
			return false, false
		}
	}
}

// Close withdraws the Subscriber's topics from the Directory, closes its
// node and every subscription's channel (all closed when it returns), and
// cancels the context of the messages it delivered. Messages delivered and
// not yet acked, and those still waiting in the node, are not acknowledged
// to their publishers, which drop them when they learn of the withdrawal
// (they go with the subscription that left, written or not; a publisher's
// Close does not count them).
func (s *Subscriber) Close() error { return s.shutdown(true) }

// shutdown closes the Subscriber; without withdraw, its topics stay
// announced, as when its process dies (the restart test's crash).
func (s *Subscriber) shutdown(withdraw bool) error {
	s.mu.Lock()
	if s.mu.closed {
		s.mu.Unlock()
		return nil
	}
	s.mu.closed = true
	var err error
	for name, t := range s.mu.topics {
		if !withdraw {
			break
		}
		if e := s.dir.Withdraw(name, t.ep); e != nil && err == nil {
			err = fmt.Errorf("watermill: withdrawing topic %q: %w", name, e)
		}
	}
	s.mu.Unlock()
	// The node first: its handlers return when it has closed its
	// connections (Stopping), so they cannot acknowledge messages no
	// subscription took.
	s.node.Abort()
	close(s.closing)
	s.cancel()
	s.open.Wait()
	return err
}
