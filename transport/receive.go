package transport

import (
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/sluicehq/sluice/lossdetect"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/wire"
)

// Handler consumes the messages that arrive for one target task. It is
// given whole runs: consecutive messages of one channel, starting at
// sequence number firstSeq, in order, each exactly once while both tasks
// live. A target's handler is called from one goroutine, one run at a time;
// handlers of different targets run concurrently.
//
// The payload slices are valid only until the handler returns: copy what you
// keep. When it returns, the messages count as consumed, and the receiver
// may acknowledge them, which lets the source send more. A slow handler
// therefore slows its sources down rather than filling memory. Close and
// Abort wait for handlers to return: one that blocks on something other
// than the node (an application yet to take a message) also watches
// [Node.Stopping].
//
// A handler may close its own node, on a fatal error say: [Node.Close] and
// [Node.Abort] called from it do not wait for it, and it is given nothing
// more once the call returned (but for an inline handler's Close, which
// finishes in the background; see Node.Close).
type Handler func(ch taskid.Channel, firstSeq uint64, msgs []Message)

// Message is one message of a channel: the timestamp its source sent it
// with (the engine's event time; the transport only carries it) and its
// payload. Who owns Payload is said where a Message is passed: a
// [Handler]'s are valid until it returns; [Sender.SendRun] copies them.
// It is the wire's decoded message, so that a run is handed to a handler
// as it was decoded.
type Message = wire.Message

type pair struct{ source, target taskid.ID }

// recvState is the receiving side of one (source, target) pair on this node.
// It outlives connections: a reconnected channel resumes where it stopped.
type recvState struct {
	key   pair
	inbox *inbox

	mu struct {
		sync.Mutex
		r    *lossdetect.Receiver
		conn *conn  // where acks go: the connection of the newest OPEN
		num  uint32 // the channel's number there
	}
}

func (rs *recvState) onOpen(c *conn, o wire.Open, ic *inChan) {
	rs.mu.Lock()
	v := rs.mu.r.OnOpen(o.Epoch, o.FirstSeq)
	if v == lossdetect.Stale {
		rs.mu.Unlock()
		ic.stale = true
		c.in.counts.stale++
		return
	}
	rs.mu.conn, rs.mu.num = c, o.Channel
	rs.answerLocked()
}

// answerLocked sends every ack the receiver has ready (an Open ack comes
// before a request's) and unlocks rs.mu. The acks are queued before the
// lock is released, so that none goes out under a channel number after
// detach (lock order: rs.mu, then conn.mu).
func (rs *recvState) answerLocked() {
	defer rs.mu.Unlock()
	conn, num := rs.mu.conn, rs.mu.num
	for {
		a, ok := rs.mu.r.Answer()
		if !ok {
			return
		}
		if conn != nil {
			conn.sendAck(num, a)
		}
	}
}

// detach stops acks from going out under channel number num of c, which the
// source closed: it may already give the number to another channel.
func (rs *recvState) detach(c *conn, num uint32) {
	rs.mu.Lock()
	if rs.mu.conn == c && rs.mu.num == num {
		rs.mu.conn = nil
	}
	rs.mu.Unlock()
}

func (rs *recvState) onAckRequest(c *conn, r wire.AckRequest) {
	rs.mu.Lock()
	switch rs.mu.r.OnAckRequest(r.Epoch, r.Seq) {
	case lossdetect.Stale:
		rs.mu.Unlock()
		c.in.counts.stale++
		return
	case lossdetect.Accept:
		// Acks go where the source asks for them: an OPEN read late from
		// a connection that had broken already would otherwise send them
		// there, and the channel would stall until its next OPEN.
		rs.mu.conn, rs.mu.num = c, r.Channel
	}
	rs.answerLocked()
}

// onRun checks a run's messages and hands the accepted ones to the target:
// to its inline handler, or copied into its inbox. It runs on c's loop;
// msgs alias c's read buffer.
func (rs *recvState) onRun(c *conn, ic *inChan, firstSeq uint64, msgs []Message) error {
	in := rs.inbox
	// Acceptance and hand-off happen under in.order, so that a target that
	// turns inline meanwhile, or runs arriving on two connections, keep the
	// order of each channel.
	in.order.Lock()
	defer in.order.Unlock()
	if h := in.inlineH; h != nil {
		if !c.node.closing.Load() { // a node shutting down calls no inline handler (Node.Abort)
			rs.runInline(c, ic, firstSeq, msgs, h)
		}
		return nil
	}
	var size int
	for i := range msgs {
		size += len(msgs[i].Payload)
	}
	// The budget is checked before the receiver accepts anything: a run
	// accepted and then dropped would leave the receiver expecting
	// messages after ones the task never got.
	cost := inboundCost(size, len(msgs))
	if c.inbound.Add(cost) > int64(c.node.o.inboundBudget) {
		c.inbound.Add(-cost)
		return ErrInboundBudget
	}
	d := getDelivery(len(msgs), size)
	d.rs, d.conn, d.ch = rs, c, ic.key
	rs.mu.Lock()
	lo, n := rs.acceptLocked(c, ic, firstSeq, msgs)
	rs.mu.Unlock()
	d.first = firstSeq + uint64(lo)
	for _, m := range msgs[lo : lo+n] {
		d.add(m)
	}
	if refused := cost - inboundCost(d.bytes, len(d.msgs)); refused > 0 {
		c.inbound.Add(-refused)
	}
	if len(d.msgs) == 0 {
		putDelivery(d)
		return nil
	}
	c.in.counts.bytes += uint64(d.bytes)
	in.push(d)
	return nil
}

// messageCost is what a queued message costs the inbound budget beyond its
// payload: its Message record. Without it a peer that ignores flow control
// could queue any number of empty messages at no cost. An honest sender
// stays within the budget all the same: its window charges its peer budget
// (which is to stay below the receivers' inbound budget) a record of the
// same size and the message's head for each message it retains.
const messageCost = int(unsafe.Sizeof(Message{}))

// inboundCost is what n messages of size payload bytes in all cost the
// inbound budget.
func inboundCost(size, n int) int64 { return int64(size) + int64(n)*int64(messageCost) }

// acceptLocked asks the receiver about a run's messages, firstSeq on, and
// counts what it refuses. The receiver accepts only its next sequence
// number, so the accepted messages are consecutive: msgs[lo:lo+n]. A run
// accepted whole, the common case, is decided in one step.
func (rs *recvState) acceptLocked(c *conn, ic *inChan, firstSeq uint64, msgs []Message) (lo, n int) {
	r := rs.mu.r
	if r.AcceptRun(ic.key.Epoch, firstSeq, len(msgs)) {
		return 0, len(msgs)
	}
	for i := range msgs {
		switch r.OnData(ic.key.Epoch, firstSeq+uint64(i)) {
		case lossdetect.Accept:
			if n == 0 {
				lo = i
			}
			n++
		case lossdetect.Duplicate:
			c.in.counts.dup++
		case lossdetect.Gap:
			c.in.counts.gap++
		case lossdetect.Stale:
			c.in.counts.stale++
		}
	}
	return lo, n
}

// runInline gives the accepted messages of a run to an inline handler, in
// place, and counts them consumed when it returns. The caller holds
// rs.inbox.order.
func (rs *recvState) runInline(c *conn, ic *inChan, firstSeq uint64, msgs []Message, h Handler) {
	rs.mu.Lock()
	lo, n := rs.acceptLocked(c, ic, firstSeq, msgs)
	rs.mu.Unlock()
	if n == 0 {
		return
	}
	acc := msgs[lo : lo+n]
	var size int
	for i := range acc {
		size += len(acc[i].Payload)
	}
	c.in.counts.bytes += uint64(size)
	h(ic.key, firstSeq+uint64(lo), acc)
	rs.consumed(ic.key.Epoch, firstSeq+uint64(lo+n))
}

// consumed is called after the handler (on the inbox goroutine, or inline) returned the
// messages of epoch below through. The consumption of an epoch the receiver
// has left behind says nothing about the current one: counting it would
// acknowledge messages of the new epoch that are queued, not consumed.
func (rs *recvState) consumed(epoch, through uint64) {
	rs.mu.Lock()
	if epoch != rs.mu.r.Epoch() {
		rs.mu.Unlock()
		return
	}
	rs.mu.r.Consumed(through)
	rs.answerLocked()
}

func (c *conn) sendAck(num uint32, a lossdetect.Ack) {
	f := wire.Ack{Channel: num, Epoch: a.Epoch, ReqSeq: a.ReqSeq, Count: a.Count, Next: a.Next}
	if a.Open {
		f.Flags |= wire.AckOpen
	}
	c.sendCtrl(func(b []byte) []byte { return wire.AppendAck(b, f) })
}

// delivery is one accepted run waiting in an inbox, with its own copy of
// the payloads.
type delivery struct {
	rs    *recvState
	conn  *conn
	ch    taskid.Channel
	first uint64
	msgs  []Message
	buf   []byte
	bytes int
	// The pools' boxes msgs and buf came in (nil: made, not pooled), put
	// back with them: a box made at each Put would be an allocation a
	// delivery.
	msgsBox *[]Message
	bufBox  *[]byte
}

var deliveryPool = sync.Pool{New: func() any { return new(delivery) }}

// Delivery buffers come from pools by size class, powers of two from 64
// bytes (and message slices from one message), so a queued delivery holds at most twice what it carries (with ten
// thousand slow channels each holding a message or two, oversized buffers
// would multiply the memory in inboxes) and buffers are still reused.
const (
	minClassShift = 6
	numClasses    = 24 - minClassShift // up to 16 MiB; larger runs are allocated exactly
)

var (
	bufPools [numClasses]sync.Pool // of *[]byte
	msgPools [numClasses]sync.Pool // of *[]Message, classes counted in messages from 1
)

func sizeClass(n, minShift int) int {
	c := 0
	for (1 << (minShift + c)) < n {
		c++
	}
	return c
}

// getDelivery returns a delivery with room for n messages of size bytes in
// all.
func getDelivery(n, size int) *delivery {
	d := deliveryPool.Get().(*delivery)
	if c := sizeClass(size, minClassShift); c < numClasses {
		if p, ok := bufPools[c].Get().(*[]byte); ok {
			d.buf, d.bufBox = (*p)[:0], p
		} else {
			d.buf = make([]byte, 0, 1<<(minClassShift+c))
		}
	} else {
		d.buf = make([]byte, 0, size)
	}
	if c := sizeClass(n, 0); c < numClasses {
		if p, ok := msgPools[c].Get().(*[]Message); ok {
			d.msgs, d.msgsBox = (*p)[:0], p
		} else {
			d.msgs = make([]Message, 0, 1<<c)
		}
	} else {
		d.msgs = make([]Message, 0, n)
	}
	return d
}

func putDelivery(d *delivery) {
	clear(d.msgs)
	if c := sizeClass(cap(d.buf), minClassShift); c < numClasses && cap(d.buf) == 1<<(minClassShift+c) {
		putBoxed(&bufPools[c], d.bufBox, d.buf)
	}
	if c := sizeClass(cap(d.msgs), 0); c < numClasses && cap(d.msgs) == 1<<c {
		putBoxed(&msgPools[c], d.msgsBox, d.msgs)
	}
	d.msgs, d.buf, d.msgsBox, d.bufBox = nil, nil, nil, nil
	d.rs, d.conn, d.bytes = nil, nil, 0
	deliveryPool.Put(d)
}

// putBoxed puts s, emptied, into pool in box, the box it came out of (a
// new one if it was made, not pooled).
func putBoxed[T any](pool *sync.Pool, box *[]T, s []T) {
	if box == nil {
		box = new([]T)
	}
	*box = s[:0]
	pool.Put(box)
}

func (d *delivery) add(m Message) {
	off := len(d.buf)
	d.buf = append(d.buf, m.Payload...)
	// buf has room for the whole run (getDelivery), so append never moves
	// it and earlier payload slices stay valid.
	d.msgs = append(d.msgs, Message{Ts: m.Ts, Payload: d.buf[off:len(d.buf):len(d.buf)]})
	d.bytes += len(m.Payload)
}

// inbox is a target task's queue of accepted runs. Its length is bounded by
// flow control: no source sends more than its window before the handler
// consumes.
type inbox struct {
	target taskid.ID
	// wake holds a token once a run is queued, or the node shuts down
	// (stopped): the inbox's goroutine waits on it alone, a channel
	// receive rather than a select.
	wake    chan struct{}
	stopped atomic.Bool
	// supplying is set, under the node's mu, while HandleAll's function
	// makes the target's handler (Node.supply), so that it is asked once.
	supplying bool

	// order is held while a run is accepted and handed over, and while
	// the handler turns inline; inlineH, set under it, is the inline
	// handler (nil: the inbox's goroutine delivers).
	order   sync.Mutex
	inlineH Handler

	// goid is the id of the goroutine that delivers the queued runs,
	// set by it before it delivers any (0: none), so that a handler
	// closing its node is known by its goroutine (Node.leaveHandler).
	// left is set once that goroutine no longer counts in the node's
	// bgDone: it has ended, or its handler closes the node, which then
	// does not wait for it, and it delivers nothing more.
	goid atomic.Uint64
	left atomic.Bool

	mu struct {
		sync.Mutex
		q       []*delivery
		head    int
		handler Handler
		running bool
	}
}

func newInbox(target taskid.ID) *inbox {
	return &inbox{target: target, wake: make(chan struct{}, 1)}
}

// stop makes the inbox's goroutine return once it has delivered what is
// queued (run).
func (in *inbox) stop() {
	in.stopped.Store(true)
	select {
	case in.wake <- struct{}{}:
	default: // a token waits already
	}
}

func (in *inbox) push(d *delivery) {
	in.mu.Lock()
	in.mu.q, in.mu.head = appendQueue(in.mu.q, in.mu.head, d)
	in.mu.Unlock()
	select {
	case in.wake <- struct{}{}:
	default:
	}
}

// appendQueue appends items to a queue popped from the front, whose live
// part is q[head:], and returns the queue and its head. When the append
// would grow q it first moves the live part to the front: a queue reset
// only when it empties (an inbox, a connection's ready list) would
// otherwise, under a load that never lets it empty (a task that never
// catches up, a connection with always more channels ready than one batch
// takes), grow by a slot for everything it ever held.
func appendQueue[T any](q []T, head int, items ...T) ([]T, int) {
	if head > 0 && len(q)+len(items) > cap(q) {
		n := copy(q, q[head:])
		clear(q[n:])
		q, head = q[:n], 0
	}
	return append(q, items...), head
}

// deliver gives d to h and counts its messages consumed.
func deliver(h Handler, d *delivery) {
	h(d.ch, d.first, d.msgs)
	d.conn.inbound.Add(-inboundCost(d.bytes, len(d.msgs)))
	d.rs.consumed(d.ch.Epoch, d.first+uint64(len(d.msgs)))
	putDelivery(d)
}

// setHandlerLocked registers h, the target's only handler.
func (in *inbox) setHandlerLocked(h Handler) error {
	if in.mu.handler != nil {
		return fmt.Errorf("transport: task %v already has a handler", in.target)
	}
	in.mu.handler = h
	return nil
}

// goInline makes h, the target's handler, inline, unless runs that
// arrived before it wait in the inbox: it reports whether it did. Those
// runs are not delivered here: the caller holds the node's lock, which
// the handler may need (Node.Peer, Node.Close); runThenInline delivers
// them. The caller may take in.order under the node's lock because the
// target had no handler: no inline handler holds in.order while it waits
// for the node's lock.
func (in *inbox) goInline(h Handler) bool {
	in.order.Lock()
	defer in.order.Unlock()
	in.mu.Lock()
	waiting := in.mu.head < len(in.mu.q)
	in.mu.Unlock()
	if !waiting {
		in.inlineH = h
	}
	return !waiting
}

// runThenInline delivers the runs waiting for the inline handler h, on
// the inbox's goroutine as run does, and makes h inline once none waits:
// under in.order, which a run arriving holds while it is queued, so that
// no run is delivered inline before the queued ones, nor while one is.
// It stops early, as run does, once the handler closed its node (left).
func (in *inbox) runThenInline(h Handler) {
	for {
		if !in.deliverQueued(h) {
			return
		}
		in.order.Lock()
		in.mu.Lock()
		empty := in.mu.head == len(in.mu.q)
		in.mu.Unlock()
		if empty {
			in.inlineH = h
		}
		in.order.Unlock()
		if empty {
			return
		}
	}
}

func (in *inbox) pop() *delivery {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.mu.head == len(in.mu.q) {
		in.mu.q, in.mu.head = in.mu.q[:0], 0
		return nil
	}
	d := in.mu.q[in.mu.head]
	in.mu.q[in.mu.head] = nil
	in.mu.head++
	return d
}

// leave stops the node's shutdown from waiting for the inbox's goroutine
// (n.bgDone), once.
func (in *inbox) leave(n *Node) {
	if in.left.CompareAndSwap(false, true) {
		n.bgDone.Done()
	}
}

// deliverQueued gives h the runs queued in the inbox, in order, until none
// is left (true) or the handler has closed its node (left: false).
func (in *inbox) deliverQueued(h Handler) bool {
	for d := in.pop(); d != nil; d = in.pop() {
		deliver(h, d)
		if in.left.Load() {
			return false
		}
	}
	return true
}

// run delivers to the handler until the inbox is stopped, or until the
// handler has closed its node (left).
func (in *inbox) run(h Handler) {
	for {
		if !in.deliverQueued(h) || in.stopped.Load() {
			return
		}
		<-in.wake
	}
}
