package watermill

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport"
)

// Errors of the Publisher and the Subscriber. Test them with errors.Is.
var (
	// ErrClosed means the Publisher or Subscriber was closed.
	ErrClosed = errors.New("watermill: closed")
	// ErrUndelivered means Publisher.Close gave up on messages that never
	// left the publisher: kept in a backlog because no subscription was
	// announced, or not yet written when the close timeout ended.
	ErrUndelivered = errors.New("watermill: messages not delivered when the publisher closed")
	// ErrTopicCollision means two topics of one Subscriber map to the same
	// target task (TopicTask); the second is refused.
	ErrTopicCollision = errors.New("watermill: two topics map to the same task")
)

// Publisher is a Watermill message.Publisher on a Sluice node of its own,
// which only dials. Publish sends each message to every subscription
// announced for its topic in the Directory, over one Sluice channel per
// subscription (source: this publisher's task, target: the topic's task on
// the subscriber's node), in the order of the Publish calls. When no topic
// it publishes to has a subscription at an address any more, it closes its
// node's peer there, which stops dialing it. Safe for concurrent use;
// messages of concurrent Publish calls to one topic are not interleaved.
type Publisher struct {
	node   *transport.Node
	dir    Directory
	source taskid.ID
	o      options

	ctx    context.Context // ends when the publisher stops (Close, after the flush)
	cancel context.CancelFunc

	mu struct {
		sync.Mutex
		routes map[string]*route
		closed bool
	}
	// peers are the node's peers that routes send to, by subscriber
	// address, each with the number of routes' endpoints there: the peer
	// of an address that no route uses any more is closed, so that a
	// subscriber gone for good is not redialed forever.
	peers struct {
		sync.Mutex
		m map[string]*peerUse
	}
}

type peerUse struct {
	peer *transport.Peer
	uses int
}

// route is what a Publisher knows about one topic: the subscriptions
// announced for it, each with its Sluice sender, and the backlog kept while
// there is none.
type route struct {
	p     *Publisher
	topic string
	stop  func()

	// send serializes publishing to the topic, so that every subscription
	// receives its messages in one order, and guards the backlog, took,
	// closed and buf. It is a lock (lock, unlock) made of a channel of one
	// slot, so that a Publish waiting for it gives up when its context
	// ends.
	send chan struct{}
	// closed is set by Close once it has flushed the backlog: a Publish
	// that found the route before Close and takes send after it fails
	// rather than leave its message where nothing sends it.
	closed       bool
	backlog      [][]byte
	backlogBytes int
	// took holds the senders that took the backlog's first message in a
	// flush that then failed at another: the next flush sends it to the
	// others only.
	took map[*transport.Sender]bool
	// partial is the UUID of the last message a Publish sent to some
	// subscriptions and then failed to send to another, and partialTook
	// those that took it: a Publish of the same message again (a
	// caller's retry) sends it to the others only.
	partial     string
	partialTook map[*transport.Sender]bool
	buf         []byte

	mu struct {
		sync.Mutex
		senders map[Endpoint]*transport.Sender
		list    []*transport.Sender // in the order the directory lists their endpoints
		changed chan struct{}       // closed and replaced when senders change
	}
}

// NewPublisher starts a Publisher and its node. The node's source task is
// derived from its random node id, so that publishers never share a channel.
func NewPublisher(dir Directory, opts ...Option) (*Publisher, error) {
	o := newOptions(opts)
	node, err := transport.NewNode(o.node...)
	if err != nil {
		return nil, err
	}
	id := node.ID()
	p := &Publisher{
		node:   node,
		dir:    dir,
		source: taskid.ID{Processor: uint32(id >> 32), Index: uint32(id)},
		o:      o,
	}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.mu.routes = make(map[string]*route)
	p.peers.m = make(map[string]*peerUse)
	return p, nil
}

// Node is the publisher's Sluice node, for its statistics.
func (p *Publisher) Node() *transport.Node { return p.node }

// Publish sends msgs to every subscription of topic, in order. It returns
// once each message is in the window of every subscription's channel (which
// keeps it until the subscriber acknowledges it), or in the topic's backlog
// when no subscription is announced. It blocks while another Publish to
// the topic (or the sending of its backlog) is under way, while a channel
// has no credit (the subscriber has not acknowledged enough) or while the
// backlog is full, until the message's context ends
// (message.Message.Context) or the publisher closes.
//
// A subscription that lacks credit until the message's context ends, or
// whose channel failed for good, does not keep the message from the
// others: they take it, and Publish returns the error, naming the
// subscription's address. A subscription whose channel failed for good
// (its node refused this one, say) is dropped from the topic, once,
// until the directory lists it again. A message that some subscriptions
// took before sending it to another failed is not taken back. Publishing
// it again (the same UUID) as the topic's next message, the caller's
// retry, sends it to the others only, so that no subscription gets it
// twice.
func (p *Publisher) Publish(topic string, msgs ...*message.Message) error {
	r, err := p.route(topic)
	if err != nil {
		return err
	}
	if testHookRouted != nil {
		testHookRouted()
	}
	locked := false
	defer func() {
		if locked {
			r.unlock()
		}
	}()
	for i, m := range msgs {
		if err := r.publish(m, &locked); err != nil {
			return fmt.Errorf("watermill: publishing message %d of %d (%s) to %q: %w", i+1, len(msgs), m.UUID, topic, err)
		}
	}
	return nil
}

// Test hooks: testHookRouted is called by Publish between finding the
// topic's route and taking its send lock; testHookBacklogFull by
// publishLocked, holding the send lock, each time it waits for room in the
// backlog.
var testHookRouted, testHookBacklogFull func()

// publish sends m, or keeps it in the backlog, under the route's send
// lock, which it takes first unless *locked says it holds it already.
func (r *route) publish(m *message.Message, locked *bool) error {
	ctx, cancel := r.p.sendCtx(m.Context())
	defer cancel()
	if !*locked {
		if err := r.lock(ctx); err != nil {
			return err
		}
		*locked = true
	}
	r.buf = AppendMessage(r.buf[:0], m)
	return r.publishLocked(ctx, m.UUID, r.buf)
}

// sendCtx is what sending a message whose own context is mctx waits
// under: it ends with mctx or when the publisher stops.
func (p *Publisher) sendCtx(mctx context.Context) (context.Context, context.CancelFunc) {
	if mctx == nil || mctx == context.Background() {
		return p.ctx, func() {}
	}
	ctx, cancel := context.WithCancel(mctx)
	stop := context.AfterFunc(p.ctx, cancel)
	return ctx, func() {
		stop()
		cancel()
	}
}

// lock takes the route's send lock, waiting for it until ctx ends.
func (r *route) lock(ctx context.Context) error {
	select {
	case r.send <- struct{}{}:
		return nil
	default:
	}
	select {
	case r.send <- struct{}{}:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("waiting for the topic's Publish or backlog under way: %w", r.p.ctxErr(ctx))
	}
}

func (r *route) unlock() { <-r.send }

func (p *Publisher) route(topic string) (*route, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed {
		return nil, ErrClosed
	}
	if r := p.mu.routes[topic]; r != nil {
		return r, nil
	}
	r := &route{p: p, topic: topic, send: make(chan struct{}, 1),
		took: make(map[*transport.Sender]bool), partialTook: make(map[*transport.Sender]bool)}
	r.mu.senders = make(map[Endpoint]*transport.Sender)
	r.mu.changed = make(chan struct{})
	stop, err := p.dir.Watch(topic, r.update)
	if err != nil {
		return nil, fmt.Errorf("watermill: watching topic %q: %w", topic, err)
	}
	r.stop = stop
	p.mu.routes[topic] = r
	return r, nil
}

// update is the directory's news about the topic's endpoints: it opens a
// channel to each new one and closes those of the ones withdrawn (their
// unacknowledged messages go with their subscription).
func (r *route) update(eps []Endpoint) {
	r.mu.Lock()
	defer r.mu.Unlock()
	keep := make(map[Endpoint]bool, len(eps))
	list := make([]*transport.Sender, 0, len(eps))
	for _, ep := range eps {
		if keep[ep] {
			continue
		}
		keep[ep] = true
		s := r.mu.senders[ep]
		if s == nil {
			var err error
			if s, err = r.p.openSender(ep); err != nil {
				r.p.o.log.Warn("watermill: cannot open a channel to a subscription", "topic", r.topic, "addr", ep.Addr, "err", err)
				continue
			}
			r.mu.senders[ep] = s
		}
		list = append(list, s)
	}
	for ep, s := range r.mu.senders {
		if !keep[ep] {
			r.p.closeSender(ep, s)
			delete(r.mu.senders, ep)
		}
	}
	r.mu.list = list
	close(r.mu.changed)
	r.mu.changed = make(chan struct{})
	if len(r.mu.list) > 0 {
		go r.drain()
	}
}

// openSender opens the channel to ep, dialing its address if no route
// sends there yet.
func (p *Publisher) openSender(ep Endpoint) (*transport.Sender, error) {
	p.peers.Lock()
	defer p.peers.Unlock()
	u := p.peers.m[ep.Addr]
	if u == nil {
		peer, err := p.node.Peer(ep.Addr)
		if err != nil {
			return nil, err
		}
		u = &peerUse{peer: peer}
	}
	s, err := u.peer.OpenSender(p.ctx, p.source, ep.Task)
	if err != nil {
		if u.uses == 0 {
			_ = u.peer.Close()
		}
		return nil, err
	}
	u.uses++
	p.peers.m[ep.Addr] = u
	return s, nil
}

// closeSender closes s, the channel to ep, which was withdrawn, and the
// peer of its address if no route sends there any more.
func (p *Publisher) closeSender(ep Endpoint, s *transport.Sender) {
	_ = s.Close()
	p.peers.Lock()
	defer p.peers.Unlock()
	u := p.peers.m[ep.Addr]
	if u.uses--; u.uses > 0 {
		return
	}
	delete(p.peers.m, ep.Addr)
	_ = u.peer.Close()
}

func (r *route) current() ([]*transport.Sender, <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.list, r.mu.changed
}

// drain sends the backlog to the subscriptions that just appeared.
func (r *route) drain() {
	if r.lock(r.p.ctx) != nil {
		return // the publisher stopped: Close counts what the backlog holds
	}
	defer r.unlock()
	if r.closed {
		// Close has counted the backlog as undelivered (a subscription
		// announced while it stopped watching): sent now, it would reach
		// a subscriber after Close told its caller it had not.
		return
	}
	if senders, _ := r.current(); len(senders) > 0 {
		if err := r.flushLocked(r.p.ctx, senders); err != nil && r.p.ctx.Err() == nil {
			r.p.o.log.Warn("watermill: sending the backlog", "topic", r.topic, "err", err)
		}
	}
}

// publishLocked sends one encoded message, whose UUID is uuid, or keeps it
// in the backlog, waiting for credit or room until ctx (sendCtx) ends.
func (r *route) publishLocked(ctx context.Context, uuid string, payload []byte) error {
	if r.closed {
		return ErrClosed
	}
	// Refused here, not only by the channel: kept in the backlog it would
	// block the topic for good once a subscriber came.
	if most := r.p.node.MaxPayload(); len(payload) > most {
		return fmt.Errorf("%w: the message is %d bytes encoded, a channel's window takes at most %d", transport.ErrTooLarge, len(payload), most)
	}
	for {
		senders, changed := r.current()
		if len(senders) > 0 {
			if err := r.flushLocked(ctx, senders); err != nil {
				return err
			}
			return r.sendLocked(ctx, senders, uuid, payload)
		}
		if len(r.backlog) < r.p.o.backlogMsgs && r.backlogBytes+len(payload) <= r.p.o.backlogBytes {
			r.backlog = append(r.backlog, append([]byte(nil), payload...))
			r.backlogBytes += len(payload)
			return nil
		}
		if testHookBacklogFull != nil {
			testHookBacklogFull()
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return r.p.ctxErr(ctx)
		}
	}
}

// sendLocked sends payload, the message uuid, on every sender but those
// that took it in a Publish of the same message that failed part-way.
func (r *route) sendLocked(ctx context.Context, senders []*transport.Sender, uuid string, payload []byte) error {
	if uuid == "" || uuid != r.partial {
		clear(r.partialTook)
	}
	err := r.sendAll(ctx, senders, payload, r.partialTook)
	r.partial = ""
	if err != nil {
		r.partial = uuid
	} else {
		clear(r.partialTook)
	}
	return err
}

// flushLocked sends the backlog, oldest first. A message that some
// senders took before another failed stays first, and the next flush
// sends it to the others only (took): no subscription gets it twice.
func (r *route) flushLocked(ctx context.Context, senders []*transport.Sender) error {
	for len(r.backlog) > 0 {
		if err := r.sendAll(ctx, senders, r.backlog[0], r.took); err != nil {
			return err
		}
		clear(r.took)
		r.backlogBytes -= len(r.backlog[0])
		r.backlog[0] = nil
		r.backlog = r.backlog[1:]
	}
	r.backlog = nil
	return nil
}

// sendAll sends payload on every sender but those in took. If it fails,
// it adds to took the senders that have the message now, so that sending
// it again reaches the others only; a send that succeeds costs took
// nothing. A sender closed because its subscription was withdrawn is
// passed over: the message was for a subscription that is gone. One that
// failed for good (its channel closed with an error, or the subscriber's
// node refused this one) is dropped from the route, so that it holds up no
// later message, and its error is returned, this once, with the others'. A
// send that waited for credit until ctx ended does not stop the rest: the
// senders with credit take the message.
func (r *route) sendAll(ctx context.Context, senders []*transport.Sender, payload []byte, took map[*transport.Sender]bool) error {
	p := r.p
	ts := time.Now().UnixNano()
	var errs []error
	var missed []*transport.Sender // out of credit: the ones a retry is for
	for _, s := range senders {
		if took[s] {
			continue
		}
		err := s.Send(ctx, ts, payload)
		switch {
		case err == nil:
		case p.ctx.Err() != nil:
			return ErrClosed
		case errors.Is(err, transport.ErrClosed):
		case ctx.Err() != nil:
			missed = append(missed, s)
			errs = append(errs, fmt.Errorf("subscription at %s: %w", s.Peer().Addr(), p.ctxErr(ctx)))
		default:
			r.drop(s, err)
			errs = append(errs, fmt.Errorf("subscription at %s, dropped: %w", s.Peer().Addr(), err))
		}
	}
	if len(errs) == 0 {
		return nil
	}
	for _, s := range senders {
		if !slices.Contains(missed, s) {
			took[s] = true // or it is gone from the route, which makes it moot
		}
	}
	return errors.Join(errs...)
}

// drop takes s, which failed for good with err, out of the route; the
// directory's next list of the topic's endpoints that names it opens a new
// channel to it.
func (r *route) drop(s *transport.Sender, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for ep, rs := range r.mu.senders {
		if rs != s {
			continue
		}
		r.p.o.log.Warn("watermill: dropping a subscription whose channel failed", "topic", r.topic, "addr", ep.Addr, "err", err)
		r.p.closeSender(ep, s)
		delete(r.mu.senders, ep)
		// A new list: callers may hold the old one.
		r.mu.list = slices.DeleteFunc(slices.Clone(r.mu.list), func(x *transport.Sender) bool { return x == s })
		close(r.mu.changed)
		r.mu.changed = make(chan struct{})
		return
	}
}

// ctxErr is why a send whose context ended stopped: the publisher closing,
// or the message's own context.
func (p *Publisher) ctxErr(ctx context.Context) error {
	if p.ctx.Err() != nil {
		return ErrClosed
	}
	return ctx.Err()
}

// Close stops the publisher. New Publish calls fail with ErrClosed at once,
// and so does a Publish that reaches a topic after Close has finished with it.
// Close waits, up to the close timeout (WithCloseTimeout), for Publish calls
// under way to finish, for backlogs to reach subscriptions that appear, and
// for every message sent to be acknowledged by its subscriber. It returns
// an error wrapping ErrUndelivered if messages never left the publisher by
// then (still in a backlog, or in a window unwritten). Messages written but
// not yet acknowledged are not an error: they are with the subscriber's
// node, which delivers what it has received to its subscription after the
// publisher is gone (a subscription that is slow to acknowledge, or a
// subscriber that is itself closing, is no fault of the publisher).
func (p *Publisher) Close() error {
	p.mu.Lock()
	if p.mu.closed {
		p.mu.Unlock()
		return nil
	}
	p.mu.closed = true
	routes := make([]*route, 0, len(p.mu.routes))
	for _, r := range p.mu.routes {
		routes = append(routes, r)
	}
	p.mu.Unlock()

	ctx, cancel := context.WithTimeout(context.Background(), p.o.closeTimeout)
	defer cancel()
	stopAfter := context.AfterFunc(ctx, p.cancel) // unblocks Publish and the drains
	defer stopAfter()

	var unrouted, unsent int
	for _, r := range routes {
		r.send <- struct{}{} // waits for the Publish under way
		if senders, _ := r.current(); len(senders) > 0 {
			_ = r.flushLocked(p.ctx, senders)
		}
		unrouted += len(r.backlog)
		r.closed = true
		r.unlock()
		r.stop()
	}
	for _, r := range routes {
		senders, _ := r.current()
		for _, s := range senders {
			_ = s.Flush(ctx)
			unsent += s.Stats().Unsent
		}
	}
	p.cancel()
	p.node.Abort()
	if unrouted+unsent > 0 {
		return fmt.Errorf("%w: %d kept because no subscription was announced, %d not written within %v",
			ErrUndelivered, unrouted, unsent, p.o.closeTimeout)
	}
	return nil
}
