package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/window"
	"github.com/sluicehq/sluice/wire"
)

// Peer is a remote node this node sends to. It keeps its connections up,
// redialing with exponential backoff and jitter when one breaks, and its
// channels survive the breaks. All methods are safe for concurrent use.
type Peer struct {
	node *Node
	addr string

	// charged is the memory of the channels' windows (their rings, see
	// window.Sender.Footprint), which the peer budget bounds; idle is the
	// part of it held by empty windows over their share of the budget,
	// which reclaimIdle can take back.
	charged    atomic.Int64
	idle       atomic.Int64
	reclaiming atomic.Bool
	// When a sender short of budget, or the node's timer on behalf of
	// those waiting, last looked whether it stood still, and the budget's
	// generation then (see reclaimIdle).
	lookedAt  atomic.Int64
	lookedGen atomic.Uint64
	// reclaim is what the senders waiting for the budget need, for the
	// node's timer to look for on their behalf (see awaitReclaim).
	reclaim struct {
		sync.Mutex
		need int64 // bytes; 0 once nobody waits for the budget
	}
	nchannels atomic.Int64 // open channels, which share the budget
	// rings is where the channels' windows take their rings from and give
	// them back to, holding at most an eighth of the budget more (see
	// ringPoolShare).
	rings   *window.Pool
	budget  notifier // broadcast when window memory falls or credit grows
	drained notifier // broadcast when a channel's last message is acknowledged

	// refused is the peer's permanent refusal of this node, if any. It is
	// not under mu, so that a channel can read it under its own lock.
	refused  atomic.Pointer[error]
	nextSlot atomic.Uint32
	// ctx ends when the peer closes: it stops the dial loops (wg), and
	// the dial each may have in progress.
	ctx       context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup
	closeOnce sync.Once

	// credit measures how long senders were waiting for credit, for the
	// slow-consumer alert; slow is that alert's state, which changes under
	// mu (the check, and close, which clears it), health its interval
	// (timer goroutine only).
	credit creditWaits
	slow   atomic.Bool
	health peerHealth

	// counters for [PeerStats]
	blocked      atomic.Int64 // ns senders spent waiting for credit
	resent       atomic.Uint64
	connects     atomic.Uint64
	reconnects   atomic.Uint64
	dialFailures atomic.Uint64

	mu struct {
		sync.Mutex
		conns  []*conn // by slot; nil while down
		everUp []bool  // by slot: a connection was up before
		// gone sums the traffic of the peer's closed connections, so
		// that PeerStats.Traffic stays cumulative.
		gone     ConnStats
		channels map[taskid.Channel]*channel
		// resume is, for each channel closed on this peer, the sequence
		// number its next message would have had: a channel opened again
		// with the same key (the same epoch) goes on from there, since
		// the receiver keeps the pair's state and takes a sequence number
		// once per epoch. A few bytes a key ever closed.
		resume  map[taskid.Channel]uint64
		lastErr error // why the last connection attempt or connection failed
		closed  bool
	}
}

// ringPoolShare sets the bound of a peer's ring pool: a 1/ringPoolShare
// of the peer budget. With the budget full, senders take the rings of idle
// windows back and grow their own; the pool passes the rings from one to
// the next instead of allocating, zeroing and collecting each (10,000
// channels of 1 KiB: a third of the CPU went there). The pool's rings are
// not charged to the budget, so a peer's window memory is at most
// 1 + 1/ringPoolShare of it.
const ringPoolShare = 8

// newPeer starts dialing the peer at addr. resume, if not nil, is where
// the channels of a peer closed at that address would go on (see
// Peer.Close); the new peer owns it. The caller holds n.mu and found the
// node open: the dial loops count in n.bgDone too, so that the node's
// shutdown waits for them even if they outlive a Peer.Close that could not
// wait (see Peer.close).
func newPeer(n *Node, addr string, resume map[taskid.Channel]uint64) *Peer {
	p := &Peer{node: n, addr: addr, rings: window.NewPool(n.o.peerBudget / ringPoolShare)}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.mu.conns = make([]*conn, n.o.connsPerPeer)
	p.mu.everUp = make([]bool, n.o.connsPerPeer)
	p.mu.channels = make(map[taskid.Channel]*channel)
	if resume == nil {
		resume = make(map[taskid.Channel]uint64)
	}
	p.mu.resume = resume
	for slot := range n.o.connsPerPeer {
		p.wg.Add(1)
		n.bgDone.Add(1)
		go p.dialLoop(slot)
	}
	return p
}

// Addr is the address the peer is dialed at.
func (p *Peer) Addr() string { return p.addr }

// Err returns why the peer refused this node for good (errors.Is
// ErrRejected), or nil.
func (p *Peer) Err() error {
	if e := p.refused.Load(); e != nil {
		return *e
	}
	return nil
}

// Connected reports whether every connection to the peer is up.
func (p *Peer) Connected() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.mu.conns {
		if c == nil {
			return false
		}
	}
	return true
}

// WaitConnected blocks until every connection to the peer is up, the peer
// refused this node, the peer is closed (ErrClosed), or ctx ends.
func (p *Peer) WaitConnected(ctx context.Context) error {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		if p.Connected() {
			return nil
		}
		if err := p.Err(); err != nil {
			return err
		}
		select {
		case <-p.ctx.Done():
			return ErrClosed
		case <-ctx.Done():
			p.mu.Lock()
			last := p.mu.lastErr
			p.mu.Unlock()
			if last != nil {
				return fmt.Errorf("transport: %s not connected: %w (last error: %v)", p.addr, ctx.Err(), last)
			}
			return ctx.Err()
		case <-t.C:
		}
	}
}

// OpenSender opens the channel from source to target (a task on this peer)
// with the node's epoch, or returns the sender already open for it. Messages
// sent before the connection is up are kept and sent once it is.
func (p *Peer) OpenSender(ctx context.Context, source, target taskid.ID) (*Sender, error) {
	return p.OpenSenderEpoch(ctx, source, target, p.node.epoch)
}

// OpenSenderEpoch is OpenSender with an explicit epoch: an engine that
// restarts a task opens its channels with a higher epoch, and the receiver
// drops whatever the older incarnation still sends.
func (p *Peer) OpenSenderEpoch(ctx context.Context, source, target taskid.ID, epoch uint64) (*Sender, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	key := taskid.Channel{Source: source, Target: target, Epoch: epoch}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed {
		return nil, ErrClosed
	}
	if err := p.Err(); err != nil {
		return nil, err
	}
	if ch, ok := p.mu.channels[key]; ok {
		return &Sender{ch: ch}, nil
	}
	slot := int(p.nextSlot.Add(1)-1) % len(p.mu.conns)
	ch := newChannel(p, key, slot, p.mu.resume[key])
	delete(p.mu.resume, key)
	p.mu.channels[key] = ch
	p.nchannels.Add(1)
	if c := p.mu.conns[slot]; c != nil {
		ch.mu.Lock()
		ch.attachLocked(c)
		ch.mu.Unlock()
	}
	return &Sender{ch: ch}, nil
}

// attach makes a freshly handshaken connection carry its slot's channels.
// It runs on the connection's loop. A connection closed meanwhile (by
// another goroutine: a handshake timeout, Node.abort) is not attached:
// close marks it closed before its detach takes p.mu, so under p.mu either
// it is seen closed here, and detach counted or will count it among the
// closed ones only, or detach has yet to run and will take it out.
func (p *Peer) attach(c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.closed || c.state.Load() == stClosed {
		return
	}
	p.mu.conns[c.slot] = c
	p.mu.lastErr = nil
	p.connects.Add(1)
	if p.mu.everUp[c.slot] {
		p.reconnects.Add(1)
	}
	p.mu.everUp[c.slot] = true
	for _, ch := range p.mu.channels {
		if ch.slot != c.slot {
			continue
		}
		ch.mu.Lock()
		ch.attachLocked(c)
		ch.mu.Unlock()
	}
}

// detach forgets a connection that closed.
func (p *Peer) detach(c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.mu.conns[c.slot] == c {
		p.mu.conns[c.slot] = nil
	}
	p.mu.gone.add(c.snapshot())
	for _, ch := range p.mu.channels {
		if ch.slot != c.slot {
			continue
		}
		ch.mu.Lock()
		if ch.mu.conn == c {
			ch.mu.conn = nil
			ch.mu.queued = false
			ch.mu.src.Detach()
		}
		ch.mu.Unlock()
	}
}

func (p *Peer) removeChannel(ch *channel) {
	p.mu.Lock()
	if p.mu.channels[ch.key] == ch {
		delete(p.mu.channels, ch.key)
		ch.mu.Lock()
		_, next := ch.mu.src.Progress()
		ch.mu.Unlock()
		if next > 0 {
			p.mu.resume[ch.key] = next
		}
	}
	p.mu.Unlock()
}

// refuseLocked records the peer's refusal of this node and closes its
// channels with it: nothing sent on them will ever be acknowledged, and
// their senders (and Node.Close) would otherwise wait for credit and acks
// forever. The channels are closed before the refusal is stored, so that
// whoever reads it from Err finds them closed; OpenSender, under p.mu like
// this, opens none after it. The caller holds p.mu and broadcasts drained
// and budget once it released it.
func (p *Peer) refuseLocked(refusal error) {
	if p.refused.Load() != nil {
		return // another connection slot was refused first
	}
	for _, ch := range p.mu.channels {
		ch.closeAlone(refusal)
	}
	p.refused.Store(&refusal)
}

// dialLoop keeps one connection slot up until the peer is closed.
func (p *Peer) dialLoop(slot int) {
	defer p.node.bgDone.Done()
	defer p.wg.Done()
	n := p.node
	backoff := n.o.minBackoff
	for {
		if p.ctx.Err() != nil {
			return
		}
		c, err := n.dial(p, slot)
		if err != nil {
			// The peer closed during the dial, which it cut short, or the
			// node began to shut down, refused the connection and has yet
			// to close the peer: neither is a failed dial.
			if p.ctx.Err() != nil || errors.Is(err, ErrClosed) {
				return
			}
			p.dialFailures.Add(1)
		} else {
			select {
			case <-c.done:
				err = c.closeErr
			case <-p.ctx.Done():
				n.abort(c, ErrClosed)
				<-c.done
				return
			}
			if time.Duration(n.now()-c.openedAt) > 4*backoff {
				backoff = n.o.minBackoff // it was up for a while: start over
			}
		}
		p.mu.Lock()
		p.mu.lastErr = err
		if errors.Is(err, ErrRejected) || errors.Is(err, wire.ErrVersion) || errors.Is(err, ErrAuthFailed) {
			p.refuseLocked(fmt.Errorf("transport: %s: %w: %w", p.addr, ErrRejected, err))
			p.mu.Unlock()
			n.log.Error("sluice: peer refused this node; not redialing", "peer", p.addr, "err", err)
			p.drained.broadcast()
			p.budget.broadcast()
			return
		}
		p.mu.Unlock()
		// Full jitter over [backoff/2, backoff).
		wait := backoff/2 + time.Duration(rand.Int64N(int64(backoff/2)+1))
		select {
		case <-p.ctx.Done():
			return
		case <-time.After(wait):
		}
		backoff = min(2*backoff, n.o.maxBackoff)
	}
}

// dial connects p's connection for slot and runs it. It fails with
// ErrClosed when, and only when, the node is shutting down: it tracks no
// connection then.
func (n *Node) dial(p *Peer, slot int) (*conn, error) {
	d := net.Dialer{Timeout: n.o.dialTimeout, Control: n.sizeSocket}
	nc, err := d.DialContext(p.ctx, "tcp", p.addr)
	if err != nil {
		return nil, err
	}
	if hook := testHookDialed.Load(); hook != nil {
		(*hook)(p)
	}
	c := newConn(n, p, slot)
	c.remote = p.addr
	if !n.track(c) {
		_ = nc.Close()
		return nil, ErrClosed
	}
	if n.loops == nil && n.o.tls != nil {
		nc = tls.Client(nc, n.clientTLS(p.addr))
	}
	if err := n.run(nc, c); err != nil {
		return nil, err
	}
	return c, nil
}

// testHookDialed, set only by tests, runs in dial once the socket is
// connected, before the node tracks the connection.
var testHookDialed atomic.Pointer[func(*Peer)]

// Close closes the peer for good, for a remote node that is gone: it
// stops redialing it (cutting short a dial in progress), closes its
// connections, and closes every sender open to it at once, dropping the
// messages they have not had acknowledged (flush them first to close
// gracefully). From then on Send, TrySend and Flush on those senders,
// blocked in them or not, return a [ChannelError] that errors.Is
// ErrClosed and names the peer; OpenSender, WaitConnected and WaitCredit
// return ErrClosed. Close returns once the peer's dial loops and
// connections have ended; but on an event loop (from an inline handler,
// see [Node.HandleInline]), where a connection of the peer may need that
// very loop to end, it closes the senders and returns without waiting,
// and the dial loops and connections end once the loop is free ([Node.Close]
// and [Node.Abort] wait for them). A handler of [Node.Handle] may call it
// like any other goroutine.
//
// The node then forgets the peer, and [Node.Peer] with its address makes a
// new one. Of the old one the node keeps only where each channel that
// sent anything would go on (a few bytes a channel), so that a channel
// opened again at that address with the same key continues where it
// stopped, as after [Sender.Close]: the remote node keeps the pair's
// state. A Node.Peer call that runs before Close returns may still get
// this peer, closed.
//
// Closing a peer again does nothing, nor does it touch a newer peer at the
// same address; [Node.Close] and [Node.Abort] close every peer. It returns
// nil. Safe for concurrent use.
func (p *Peer) Close() error {
	p.close(fmt.Errorf("%w: peer %s closed (Peer.Close)", ErrClosed, p.addr), !onLoop(goid()))
	resume := p.resumePoints()
	n := p.node
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.peers[p.addr] == p {
		delete(n.mu.peers, p.addr)
		if len(resume) > 0 {
			n.mu.resume[p.addr] = resume
		}
	}
	return nil
}

// resumePoints returns, for each channel of the peer closed or open, the
// sequence number its next message would have had, if any was sent: what
// a channel opened again with its key goes on from.
func (p *Peer) resumePoints() map[taskid.Channel]uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	resume := make(map[taskid.Channel]uint64, len(p.mu.resume)+len(p.mu.channels))
	maps.Copy(resume, p.mu.resume)
	for key, ch := range p.mu.channels {
		ch.mu.Lock()
		_, next := ch.mu.src.Progress()
		ch.mu.Unlock()
		if next > 0 {
			resume[key] = next
		}
	}
	return resume
}

// close stops redialing, closes the peer's connections and shuts its
// channels, with why (a ChannelError) for their senders if it is not nil,
// else ErrClosed. Unacknowledged messages are dropped. Once it returns the
// peer is closed, whoever called it first, and with wait its dial loops
// and connections have ended. Without wait (on an event loop, where a
// connection of the peer may need the loop to end) it only tells them to
// end: its channels are shut first, and the node's shutdown waits for the
// dial loops (n.bgDone).
func (p *Peer) close(why error, wait bool) {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.mu.closed = true
		if p.slow.Load() {
			p.node.clearSlowLocked(p, "the peer closed", "peer", p.addr)
		}
		chans := p.channelListLocked()
		p.mu.Unlock()
		p.cancel()
		if wait {
			p.wg.Wait()
		}
		// The channels wake their own senders; the peer's budget and
		// drained are broadcast once for all of them. A broadcast wakes
		// every sender waiting on the budget, so one a channel would cost
		// the channels times the senders waiting: with a sender blocked on
		// each of 64,000 channels, an Abort took 1.4-2.3 s on gnet, 38-43 s
		// on the net backend and 22-89 s with TLS.
		for _, ch := range chans {
			ch.closeAlone(why)
		}
		p.drained.broadcast()
		p.budget.broadcast()
	})
	if wait {
		p.wg.Wait() // for a caller that came second, after one that did not wait
	}
}

// channelList returns the peer's channels as they are now.
func (p *Peer) channelList() []*channel {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.channelListLocked()
}

// channelListLocked is channelList for a caller that holds p.mu.
func (p *Peer) channelListLocked() []*channel {
	chans := make([]*channel, 0, len(p.mu.channels))
	for _, ch := range p.mu.channels {
		chans = append(chans, ch)
	}
	return chans
}

// flush waits until every channel to the peer is fully acknowledged.
func (p *Peer) flush(ctx context.Context) error {
	for _, ch := range p.channelList() {
		if err := (&Sender{ch: ch}).Flush(ctx); err != nil && !errors.Is(err, ErrClosed) {
			return err
		}
	}
	return nil
}

// clientTLS is the node's TLS configuration for dialing addr: TLS 1.3 at
// least, and the server name taken from addr unless the configuration names
// one.
func (n *Node) clientTLS(addr string) *tls.Config {
	cfg := n.o.tls.Clone()
	cfg.MinVersion = tls.VersionTLS13
	if cfg.ServerName == "" {
		if host, _, err := net.SplitHostPort(addr); err == nil {
			cfg.ServerName = host
		}
	}
	return cfg
}
