package transport

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/sluicehq/sluice/batch"
	"github.com/sluicehq/sluice/lossdetect"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport/internal/flow"
	"github.com/sluicehq/sluice/window"
	"github.com/sluicehq/sluice/wire"
)

// Sender sends the messages of one channel (source task, target task,
// epoch). Send, TrySend and Flush are safe for concurrent use, though one
// goroutine per channel keeps messages in the order the engine means.
type Sender struct{ ch *channel }

// channel is the source side of one channel: its state machine (flow.Source:
// the window of retained messages and the loss tracker), and where it is on
// the wire.
type channel struct {
	peer       *Peer
	key        taskid.Channel
	slot       int
	maxPayload int // the largest payload the channel takes (maxPayload)
	fullBatch  int // unsent bytes at which its sender writes a batch itself (conn.writeStreaming)

	credit  notifier     // broadcast when credit is freed or the channel shuts
	blocked atomic.Int64 // ns Send and SendRun spent waiting for credit

	// hasParked says that parked holds acks: the loop read them while
	// another goroutine held mu, and left them to whoever holds mu to apply
	// as it unlocks (onAck, unlock). Beside mu, whose unlock reads it.
	hasParked atomic.Bool
	// longHold is set while mu's holder pushes a run (TrySendRun) or
	// fills a batch (fill): an ack arriving meanwhile is parked rather
	// than waited for (onAck).
	longHold atomic.Bool
	mu       struct {
		sync.Mutex
		src *flow.Source
		// idle is the window's footprint, counted in the peer's idle
		// memory, while the window is empty; 0 while it retains messages.
		idle    int64
		conn    *conn  // the connection carrying it, nil while down
		num     uint32 // its number on conn
		queued  bool   // in conn's ready list
		direct  *conn  // a conn the pusher is to write to itself once it unlocks (see conn.enqueue)
		wake    *conn  // a conn whose loop the pusher is to wake once it unlocks (see conn.scheduleLocked)
		timerAt int64  // when the node's timer will next call tick, 0: never
		closed  bool
		err     error // why it was closed, if not by Close (a *ChannelError)
		// stalledSince is, while the stall alert is on, when the
		// channel's acknowledged progress last moved; 0 while it is off.
		// The health check raises the alert, and clears it as progress
		// moves; the channel's close (shutLocked) clears it.
		stalledSince int64
	}
	parkMu sync.Mutex // guards parked, held only to add to it or take it
	parked []parkedAck
	spare  []parkedAck // parked's other buffer (under mu)
	// health is the health check's state (timer goroutine only).
	health chanHealth
	// wakeAt mirrors mu.timerAt for the timer goroutine, which skips, without
	// taking mu, the deadlines a channel no longer wants (most of them with
	// many channels: an ack usually answers a request long before its
	// timeout).
	wakeAt atomic.Int64
}

// newChannel makes the channel key, whose first message gets sequence
// number firstSeq.
func newChannel(p *Peer, key taskid.Channel, slot int, firstSeq uint64) *channel {
	ch := &channel{peer: p, key: key, slot: slot, maxPayload: maxPayload(&p.node.o), fullBatch: fullBatch(p.node.o.batch)}
	ch.mu.src = flow.New(p.node.o.window, p.node.o.loss, key.Epoch, firstSeq, p.rings)
	return ch
}

// attachLocked puts the channel on connection c: it gets a number there and
// an OPEN is queued. A channel that was open before waits for the
// receiver's answer to the OPEN, which tells where to resume.
func (ch *channel) attachLocked(c *conn) {
	if ch.mu.closed {
		return
	}
	c.mu.Lock()
	num, _, err := c.mu.outTable.Assign(ch.key)
	if err == nil {
		for int(num) >= len(c.mu.outByNum) {
			c.mu.outByNum = append(c.mu.outByNum, nil)
		}
		c.mu.outByNum[num] = ch
	}
	c.mu.Unlock()
	if err != nil {
		return
	}
	now := ch.peer.node.now()
	ch.mu.src.Attach(now)
	ch.mu.conn, ch.mu.num = c, num
	ch.mu.queued = true
	_, retained := ch.mu.src.Retained()
	if _, wake := c.enqueue(ch, retained, false); wake { // a re-opened channel sends them again
		c.wake()
	}
	ch.scheduleLocked(now)
}

// Channel is the channel this sender sends on.
func (s *Sender) Channel() taskid.Channel { return s.ch.key }

// Send copies payload into the channel, to be sent with timestamp ts. It
// blocks while the channel's window or the peer's budget is full, until
// credit is freed, the sender is closed, the peer refuses this node (Send
// then returns the refusal, errors.Is ErrRejected), or ctx ends. The
// payload may be reused as soon as Send returns.
func (s *Sender) Send(ctx context.Context, ts int64, payload []byte) error {
	for {
		err := s.ch.push(ts, payload)
		if err != ErrNoCredit {
			return err
		}
		if err := s.ch.waitCredit(ctx, ts, len(payload)); err != nil {
			return err
		}
	}
}

// TrySend is Send without blocking: it returns ErrNoCredit when the window
// or the peer's budget is full, ErrTooLarge when payload can never fit,
// ErrClosed when the sender, its peer or its node is closed, and the
// peer's refusal (errors.Is ErrRejected) when the peer refused this node.
func (s *Sender) TrySend(ts int64, payload []byte) error { return s.ch.push(ts, payload) }

func (ch *channel) push(ts int64, payload []byte) error {
	ch.mu.Lock()
	if ch.onlyWindowLocked() && len(payload) <= ch.maxPayload {
		if _, ok := ch.mu.src.TryPush(ts, payload); ok {
			c := ch.fullBatchConnLocked()
			// Not unlock: acks are parked only while a run is pushed or
			// a batch filled (longHold), and the sender's next unlock
			// after its own (writeFullBatches, its next run, its wait
			// for credit) applies them.
			ch.mu.Unlock()
			if c != nil { // a batch in 600 or so: the call is not inlined
				ch.writeFullBatches(c)
			}
			return nil
		}
	}
	err := ch.pushLocked(ts, payload)
	ch.unlockAndWrite()
	return err
}

// onlyWindowLocked reports whether a message that the window holds as it
// is (flow.Source.TryPush) needs nothing else of pushLocked: the channel
// is open, already queued on its connection, and its window not idle.
func (ch *channel) onlyWindowLocked() bool {
	return ch.mu.queued && ch.mu.idle == 0 && !ch.mu.closed
}

// unlockAndWrite releases ch.mu (unlock) and then, if a push found the
// connection idle, writes the batch from this goroutine, or, if a full
// batch waits to be sent, writes that (conn.writeStreaming).
func (ch *channel) unlockAndWrite() {
	c, w := ch.mu.direct, ch.mu.wake
	ch.mu.direct, ch.mu.wake = nil, nil
	var s *conn
	if c == nil {
		s = ch.fullBatchConnLocked()
	}
	ch.unlock()
	if c != nil {
		c.flushDirect()
	}
	if s != nil {
		ch.writeFullBatches(s)
	}
	if w != nil {
		w.wake()
	}
}

// pushLocked puts one message into the window and makes sure the
// connection will send it.
func (ch *channel) pushLocked(ts int64, payload []byte) error {
	if ch.mu.closed {
		return ch.closedErrLocked()
	}
	if len(payload) > ch.maxPayload {
		return fmt.Errorf("%w: %d bytes, a channel takes payloads of up to %d", ErrTooLarge, len(payload), ch.maxPayload)
	}
	src := ch.mu.src
	stored, ok := src.TryPush(ts, payload)
	if !ok { // the window must grow, or refuses: the budget pays for growth
		cost, ok := src.PushCost(ts, len(payload))
		if !ok {
			if _, err := src.Push(ts, payload); !errors.Is(err, window.ErrNoCredit) {
				return err // Push refuses what PushCost refused, and says why
			}
			return ErrNoCredit
		}
		if cost > 0 && !ch.peer.charge(int64(cost)) {
			return ErrNoCredit
		}
		var err error
		if stored, err = src.Push(ts, payload); err != nil {
			return err // not reached: PushCost said it fits
		}
	}
	if ch.mu.idle != 0 {
		ch.peer.idle.Add(-ch.mu.idle)
		ch.mu.idle = 0
	}
	if c := ch.mu.conn; c != nil && !ch.mu.queued && src.Ready() {
		ch.mu.queued = true
		// A channel with many messages unacknowledged is streaming: its
		// batches are the loop's to gather, not one message per write
		// (or, on a stream-driven connection, its sender's).
		inflight, _ := src.Retained()
		switch direct, wake := c.enqueue(ch, stored, inflight <= directMaxUnacked); {
		case direct:
			ch.mu.direct = c
		case wake:
			ch.mu.wake = c
		}
	}
	return nil
}

// SendRun sends msgs in order as Send would, taking the channel's lock once
// for as many as have credit. It returns once all are sent, or with the
// number sent and the error that stopped it. A task that emits several
// messages at once should prefer it to a Send each: on a 2-core AMD EPYC VM
// a message cost the sender about 10 ns less in runs of 64 than one Send
// at a time (the lock and the push's call layers once a run instead of once
// a message; results/cpu-budget).
func (s *Sender) SendRun(ctx context.Context, msgs []Message) (int, error) {
	n := 0
	for n < len(msgs) {
		k, err := s.TrySendRun(msgs[n:])
		n += k
		if err == nil {
			continue
		}
		if err != ErrNoCredit {
			return n, err
		}
		if err := s.ch.waitCredit(ctx, msgs[n].Ts, len(msgs[n].Payload)); err != nil {
			return n, err
		}
	}
	return n, nil
}

// TrySendRun sends as many of msgs, in order, as have credit now, copying
// their payloads, and returns how many it sent; the error says why it
// stopped early, as TrySend's does.
func (s *Sender) TrySendRun(msgs []Message) (int, error) {
	ch := s.ch
	ch.mu.Lock()
	ch.longHold.Store(true)
	defer ch.unlockAndWrite()
	defer ch.longHold.Store(false)
	// A message the window does not take as it is goes the general way,
	// which also queues the channel on its connection; the ones after it
	// then need only the window again.
	for i := 0; ; i++ {
		if ch.onlyWindowLocked() {
			i += ch.mu.src.TryPushRun(msgs[i:], ch.maxPayload)
		}
		if i == len(msgs) {
			return i, nil
		}
		if err := ch.pushLocked(msgs[i].Ts, msgs[i].Payload); err != nil {
			return i, err
		}
	}
}

// fullBatch is how many unsent bytes make a channel's sender write a
// batch itself (conn.writeStreaming): 15/16 of the batch size, so that the
// batch goes out nearly full rather than waiting for the last message or
// two that would fill it (64 KiB and 60 KiB measured alike).
func fullBatch(cfg batch.Config) int { return cfg.MaxBatchBytes - cfg.MaxBatchBytes/16 }

// maxPayload is the largest payload a channel of a node with options o
// takes: the window keeps each message with its wire head (timestamp delta
// and length), which counts against its bytes; and a message goes in one
// DATA frame, behind a run header, which the peer closes the connection
// over if it passes its frame limit (taken to be this node's): a larger
// message would be re-sent on a new connection, and refused, for ever.
func maxPayload(o *options) int {
	return min(o.window.MaxBytes, o.maxFrame-wire.MaxRunHeaderLen) - MaxMessageHead
}

// closedErrLocked is why a closed channel refuses messages: its own fault,
// the peer's refusal of this node, or ErrClosed. The caller holds ch.mu.
func (ch *channel) closedErrLocked() error {
	if ch.mu.err != nil {
		return ch.mu.err
	}
	if err := ch.peer.Err(); err != nil {
		return err
	}
	return ErrClosed
}

// fullBatchConnLocked returns the connection on which the channel's sender
// is to write a full batch itself (conn.writeStreaming), or nil if it has
// no full batch unsent. The caller holds ch.mu.
func (ch *channel) fullBatchConnLocked() *conn {
	// The unsent bytes first: on a push, the call that makes this check
	// once a message, they are what says no.
	if ch.mu.src.UnsentBytes() >= ch.fullBatch && ch.mu.queued && !ch.mu.closed {
		return ch.mu.conn // queued: on a connection
	}
	return nil
}

// writeFullBatches writes the channel's full batches on c from the calling
// sender's goroutine (conn.writeStreaming), as long as it has another.
func (ch *channel) writeFullBatches(c *conn) {
	for c != nil && c.writeStreaming(ch) {
		ch.mu.Lock()
		more := ch.fullBatchConnLocked() == c
		ch.unlock()
		if !more {
			return
		}
	}
}

// writeOwnTail writes the channel's unsent messages from the calling
// sender's goroutine before it waits (for its window's credit, in Flush),
// if its connection takes direct writes (conn.writeTail): on a
// stream-driven connection nothing else would write them before that state
// ends, and elsewhere it saves the loop the batch. It returns the
// channel's connection, nil if it has none.
func (ch *channel) writeOwnTail() *conn {
	ch.mu.Lock()
	c := ch.mu.conn
	tail := ch.mu.queued && !ch.mu.closed && ch.mu.src.UnsentBytes() > 0
	ch.unlock()
	if c != nil && tail {
		c.writeTail()
	}
	return c
}

// waitCredit blocks until credit may have been freed.
func (ch *channel) waitCredit(ctx context.Context, ts int64, size int) error {
	p := ch.peer
	w1, w2 := ch.credit.wait(), p.budget.wait()
	defer ch.credit.done()
	defer p.budget.done()
	ch.mu.Lock()
	cost, ok := ch.mu.src.PushCost(ts, size)
	budgetShort := ok && cost > 0 && !p.fits(int64(cost))
	ok = ch.mu.closed || (ok && !budgetShort)
	ch.unlock() // an ack parked meanwhile frees credit, and closes w1
	if ok {
		return nil
	}
	// A sender whose own window is full outruns its connection: it writes
	// what it left unsent before it waits, and its next full batches once
	// credit is back, which the loop leaves to it meanwhile
	// (conn.writeStreaming). A wait for the peer's budget says that of no
	// one channel: the loop batches what many send, as before.
	if !budgetShort {
		if c := ch.writeOwnTail(); c != nil {
			defer func() { c.markStreaming(p.node.now(), ch) }()
		}
	}
	if budgetShort {
		if p.reclaimIdle(int64(cost)) {
			return nil
		}
		// Quiet windows may hold the budget, and no ack would wake this
		// sender: the node's timer looks at them on its behalf.
		p.awaitReclaim(int64(cost))
	}
	start := p.node.now()
	p.credit.begin(start)
	defer func() {
		end := p.node.now()
		p.credit.end(end)
		d := end - start
		ch.blocked.Add(d)
		p.blocked.Add(d)
	}()
	if hook := testHookCreditWait.Load(); hook != nil {
		(*hook)(ch)
	}
	select {
	case <-w1:
	case <-w2:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// testHookCreditWait, set only by tests, runs in waitCredit as a sender
// begins to block, each time it does.
var testHookCreditWait atomic.Pointer[func(*channel)]

// Flush blocks until every message sent so far has been consumed by the
// target task and acknowledged, the sender is closed, or ctx ends. With
// messages unacknowledged on a closed sender it returns why the sender
// closed: ErrClosed after Close, the peer's refusal of this node
// (errors.Is ErrRejected), or a [ChannelError].
func (s *Sender) Flush(ctx context.Context) error {
	ch := s.ch
	ch.writeOwnTail()
	for {
		w := ch.peer.drained.wait()
		ch.mu.Lock()
		done := ch.mu.src.Drained()
		var err error
		if ch.mu.closed {
			err = ch.closedErrLocked()
		}
		ch.unlock()
		if done {
			ch.peer.drained.done()
			return nil
		}
		if err != nil {
			ch.peer.drained.done()
			return err
		}
		select {
		case <-w:
			ch.peer.drained.done()
		case <-ctx.Done():
			ch.peer.drained.done()
			return ctx.Err()
		}
	}
}

// Close closes the channel at once: messages not yet acknowledged are
// dropped. Call Flush first to close gracefully.
func (s *Sender) Close() error {
	ch := s.ch
	// The channel is closed in the same hold of its lock that takes its
	// connection and number: a reconnect (Peer.attach) after a release in
	// between would give it a number on the new connection that nothing
	// retires, and leave it open at the receiver for that connection's
	// life.
	ch.mu.Lock()
	c, num := ch.mu.conn, ch.mu.num
	wasOpen := !ch.mu.closed
	if wasOpen {
		ch.shutLocked()
	}
	ch.mu.Unlock()
	if testHookClosed != nil {
		testHookClosed(ch)
	}
	if wasOpen {
		ch.wakeShut()
	}
	ch.peer.removeChannel(ch)
	if wasOpen && c != nil {
		c.mu.Lock()
		ping := c.retireLocked(num)
		c.mu.Unlock()
		c.sendCtrl(func(b []byte) []byte { return wire.AppendClose(b, wire.Close{Channel: num}) })
		if ping != 0 {
			c.ping(ping)
		}
	}
	return nil
}

// testHookClosed, set only by tests, runs in Sender.Close once the
// channel's lock is released, before its number is retired.
var testHookClosed func(*channel)

// closeAlone marks the channel closed and releases its retained bytes;
// its senders get why, in a ChannelError, from then on if it is not nil.
// It wakes the channel's own senders, but not the peer's budget and
// drained: a caller closing many channels (Peer.close, Peer.refuseLocked)
// broadcasts those once for all of them, each broadcast waking every
// sender waiting on the budget.
func (ch *channel) closeAlone(why error) {
	ch.mu.Lock()
	if ch.mu.closed {
		ch.mu.Unlock()
		return
	}
	if why != nil && ch.mu.err == nil {
		ch.mu.err = &ChannelError{Channel: ch.key, Err: why}
	}
	ch.shutLocked()
	ch.mu.Unlock()
	ch.credit.broadcast()
}

// shutLocked marks the open channel closed and releases its retained
// bytes. The caller holds ch.mu, and wakes its waiters once it released it.
func (ch *channel) shutLocked() {
	ch.mu.closed = true
	if ch.mu.stalledSince != 0 {
		n := ch.peer.node
		n.clearStallLocked(ch, n.now(), "the channel closed")
	}
	ch.peer.charged.Add(-int64(ch.mu.src.Footprint()))
	ch.peer.idle.Add(-ch.mu.idle)
	ch.mu.idle = 0
	ch.mu.conn = nil
	ch.peer.nchannels.Add(-1)
}

// wakeShut wakes whoever waits on a channel that shutLocked closed: its
// senders waiting for credit, producers waiting for the peer's budget,
// and Flush.
func (ch *channel) wakeShut() {
	ch.credit.broadcast()
	ch.peer.budget.broadcast()
	ch.peer.drained.broadcast()
}

// fail closes the channel because the receiver broke its protocol: its
// senders get err from now on, as after Close.
func (ch *channel) fail(err error) {
	ch.mu.Lock()
	if ch.mu.err == nil && !ch.mu.closed {
		ch.mu.err = err
	}
	ch.mu.Unlock()
	ch.peer.node.log.Warn("sluice: channel closed", "channel", ch.key.String(), "peer", ch.peer.addr, "err", err)
	_ = (&Sender{ch: ch}).Close()
}

// fill appends the channel's run of unsent messages that fits to c's batch
// b, with its OPEN and ACKREQUEST frames. It runs on c's loop. It reports
// whether the channel has more to send, in which case the batch is full.
func (ch *channel) fill(c *conn, b *outBatch, now int64) (more bool) {
	ch.mu.Lock()
	ch.longHold.Store(true)
	defer ch.mu.Unlock()
	defer ch.longHold.Store(false)
	if ch.mu.conn != c || ch.mu.closed {
		return false
	}
	var n, bytes int
	var e flow.Effects
	b.data, n, bytes, more, e = ch.mu.src.Fill(now, b.data, ch.mu.num, b.room(), b.empty())
	b.msgs += n
	b.bytes += bytes
	if e.Resent > 0 {
		ch.peer.resent.Add(uint64(e.Resent))
	}
	for _, req := range e.Requests {
		if req.Open {
			b.opens = ch.appendOpen(b.opens, req)
		} else {
			b.reqs = ch.appendAckRequest(b.reqs, req)
		}
	}
	if n > 0 || len(e.Requests) > 0 {
		ch.scheduleLocked(now)
	}
	ch.mu.queued = more
	return more
}

// onAck applies an ACK from the receiver. It runs on c's loop. Where a
// sender holds ch.mu for long (pushing a run, filling a batch: longHold),
// the loop does not wait: it parks the ack, retries once it has read the
// rest of what arrived (conn.retryParked), and if the sender still holds
// the lock then, the sender applies it as it unlocks (unlock). A loop that
// waited slept until the sender let go, and then until a thread had a P
// for it again: in a one-process trace of runs of 64 (100 B, 2-core Intel
// Xeon VM) about 950 times a second, 15 us and then 49 us on average. A
// Send holds the lock for tens of nanoseconds: the loop waits for it as
// before, so that the ack's work stays with the loop rather than with a
// producer that is the bottleneck (parking those too made one Send a
// message 8-10 % slower across two processes, results/bench-intel-xeon/ack-park).
func (ch *channel) onAck(c *conn, a wire.Ack) {
	p := parkedAck{c: c, a: a, at: ch.peer.node.now()}
	locked := ch.mu.TryLock()
	if !locked && !ch.longHold.Load() {
		ch.mu.Lock() // a Send's hold
		locked = true
	}
	if locked {
		var e ackEffects
		ch.applyParkedLocked(&e) // those parked before it first
		ch.applyAckLocked(p, &e)
		ch.unlockAfter(e)
		return
	}
	ch.parkMu.Lock()
	ch.parked = append(ch.parked, p)
	ch.hasParked.Store(true)
	ch.parkMu.Unlock()
	// The holder may have unlocked before the ack was parked: the read
	// looks again as it ends.
	if n := len(c.in.parked); n == 0 || c.in.parked[n-1] != ch {
		c.in.parked = append(c.in.parked, ch)
	}
}

// retryParked applies the acks that the read which just ended parked
// (channel.onAck), for each channel whose lock is free now; where a sender
// still holds it, the sender applies them as it unlocks. Loop only.
func (c *conn) retryParked() {
	for i, ch := range c.in.parked {
		ch.applyParked()
		c.in.parked[i] = nil
	}
	c.in.parked = c.in.parked[:0]
}

// parkedAck is an ack the loop read at at (Node.now) on c, to be applied
// by whoever holds the channel's lock next.
type parkedAck struct {
	c  *conn
	a  wire.Ack
	at int64
}

// unlock releases ch.mu, and then applies the acks the loop parked while
// it was held (onAck), unless another goroutine has taken the lock since,
// which then does. Senders release ch.mu with it, but for a Send's fast
// path (push); the rest with mu.Unlock: the peer's bookkeeping under the
// peer's lock and fill under a connection's write lock, because applying
// an ack may close the channel, which takes those, and Close, stats and
// the health check, which run rarely. What they leave parked waits for the
// next unlock or, at the latest, the node timer's next tick for the
// channel, which the outstanding ack request the ack answers keeps
// scheduled.
func (ch *channel) unlock() {
	ch.mu.Unlock()
	if ch.hasParked.Load() {
		ch.applyParked()
	}
}

// applyParked applies the parked acks if it can take ch.mu at once.
func (ch *channel) applyParked() {
	if ch.hasParked.Load() && ch.mu.TryLock() {
		ch.unlockAfter(ackEffects{})
	}
}

// unlockAfter applies the parked acks, releases ch.mu, and does what they
// and e (what the caller applied before) call for; again while more are
// parked and the lock is free.
func (ch *channel) unlockAfter(e ackEffects) {
	for {
		ch.applyParkedLocked(&e)
		ch.mu.Unlock()
		e.run(ch)
		if !ch.hasParked.Load() || !ch.mu.TryLock() {
			return
		}
		e = ackEffects{}
	}
}

// ackEffects is what applying acks calls for once ch.mu is released.
type ackEffects struct {
	freed   bool  // credit grew: wake the channel's senders and the peer's
	drained bool  // and the window drained: wake Flush
	wake    *conn // a connection whose loop is to flush (conn.scheduleLocked)
	err     error // an invalid ack: the channel fails
}

// run does what e calls for. The caller holds no lock.
func (e *ackEffects) run(ch *channel) {
	if e.freed {
		// Credit grew on this channel, and perhaps the peer's budget:
		// wake the channel's senders and anyone waiting for any credit;
		// and Flush if that drained it. An ack that freed nothing (the
		// answer to an OPEN, a repeat) drained nothing either.
		ch.peer.budget.broadcast()
		ch.credit.broadcast()
		if e.drained {
			ch.peer.drained.broadcast()
		}
	}
	if e.wake != nil {
		e.wake.wake()
	}
	if e.err != nil {
		ch.fail(e.err)
	}
}

// applyParkedLocked applies the parked acks, oldest first, adding what
// they call for to e. The caller holds ch.mu.
func (ch *channel) applyParkedLocked(e *ackEffects) {
	if !ch.hasParked.Load() {
		return
	}
	ch.parkMu.Lock()
	acks := ch.parked
	ch.parked = ch.spare[:0]
	ch.hasParked.Store(false)
	ch.parkMu.Unlock()
	for i := range acks {
		ch.applyAckLocked(acks[i], e)
		acks[i] = parkedAck{}
	}
	ch.spare = acks[:0]
}

// applyAckLocked applies one ack. The caller holds ch.mu.
func (ch *channel) applyAckLocked(p parkedAck, e *ackEffects) {
	c := p.c
	if ch.mu.conn != c || ch.mu.closed || e.err != nil {
		return
	}
	src := ch.mu.src
	r := src.OnAck(p.at, lossdetect.Ack{
		Open: p.a.Flags&wire.AckOpen != 0, Epoch: p.a.Epoch, ReqSeq: p.a.ReqSeq, Count: p.a.Count, Next: p.a.Next,
	})
	if r.Invalid {
		e.err = &ChannelError{Channel: ch.key, Err: fmt.Errorf("%w: next %d, request %d", ErrInvalidAck, p.a.Next, p.a.ReqSeq)}
		return
	}
	if r.Released > 0 {
		ch.peer.charged.Add(-int64(r.Released))
	}
	drained := src.Drained()
	if drained && r.Freed > 0 && src.Footprint() > ch.peer.share() {
		ch.mu.idle = int64(src.Footprint())
		ch.peer.idle.Add(ch.mu.idle)
	}
	if !ch.mu.queued && src.Ready() {
		ch.mu.queued = true
		if _, wake := c.enqueue(ch, 0, false); wake {
			e.wake = c // none on the loop while it reads (conn.scheduleLocked)
		}
	}
	ch.scheduleLocked(p.at)
	if r.Freed > 0 {
		e.freed = true
		e.drained = e.drained || drained
	}
}

// scheduleLocked makes sure the node's timer calls tick by the tracker's
// next deadline.
func (ch *channel) scheduleLocked(now int64) {
	at, ok := ch.mu.src.NextDeadline() // none while the OPEN waits for fill
	if !ok {
		if ch.mu.timerAt != 0 {
			ch.mu.timerAt = 0 // the pending wake-up is not needed
			ch.wakeAt.Store(0)
		}
		return
	}
	if ch.mu.timerAt != 0 && ch.mu.timerAt <= at {
		return // an earlier wake-up will look again
	}
	ch.mu.timerAt = at
	ch.wakeAt.Store(at)
	ch.peer.node.timers.wakeChannel(ch, at)
}

// tick runs the tracker's timers: quiet-channel AckRequests and repeats of
// unanswered ones. The node's timer goroutine calls it.
func (ch *channel) tick(now int64) {
	ch.mu.Lock()
	ch.mu.timerAt = 0
	ch.wakeAt.Store(0)
	// Acks parked for this lock's holder come first: the tracker would
	// otherwise take the requests they answer for unanswered.
	var e ackEffects
	ch.applyParkedLocked(&e)
	if ch.mu.closed {
		ch.unlockAfter(e)
		return
	}
	c, num := ch.mu.conn, ch.mu.num
	var reqs []lossdetect.AckRequest
	if c != nil {
		reqs = ch.mu.src.Tick(now).Requests
	}
	// The requests are queued under ch.mu (before c.mu in the lock order):
	// a Sender.Close after its release would otherwise queue the channel's
	// CLOSE in front of them, and the receiver, which forgets the number
	// at the CLOSE, closes the connection over a frame for it.
	for _, req := range reqs {
		if req.Open {
			c.sendCtrl(func(b []byte) []byte { return ch.appendOpenNum(b, num, req) })
		} else {
			c.sendCtrl(func(b []byte) []byte {
				return wire.AppendAckRequest(b, wire.AckRequest{Channel: num, Epoch: req.Epoch, Seq: req.Seq})
			})
		}
	}
	ch.scheduleLocked(now)
	ch.unlockAfter(e)
	if hook := testHookTicked.Load(); hook != nil {
		(*hook)(ch, len(reqs))
	}
}

// testHookTicked, set only by tests, runs in tick once the channel's lock
// is released, with the number of requests the tick had to send.
var testHookTicked atomic.Pointer[func(ch *channel, reqs int)]

func (ch *channel) appendAckRequest(b []byte, req lossdetect.AckRequest) []byte {
	return wire.AppendAckRequest(b, wire.AckRequest{Channel: ch.mu.num, Epoch: req.Epoch, Seq: req.Seq})
}

func (ch *channel) appendOpen(b []byte, req lossdetect.AckRequest) []byte {
	return ch.appendOpenNum(b, ch.mu.num, req)
}

func (ch *channel) appendOpenNum(b []byte, num uint32, req lossdetect.AckRequest) []byte {
	return wire.AppendOpen(b, wire.Open{
		Channel: num, Source: ch.key.Source, Target: ch.key.Target, Epoch: req.Epoch, FirstSeq: req.Seq,
	})
}
