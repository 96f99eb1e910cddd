package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sluicehq/sluice/lossdetect"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/wire"
)

// Node is one process's endpoint: it accepts peers (with [WithListen]),
// dials them ([Node.Peer]) and delivers arriving messages to the handlers
// of its target tasks ([Node.Handle]). All methods are safe for concurrent
// use.
type Node struct {
	o     options
	id    uint64
	epoch uint64
	start time.Time
	// startLoad is start on the loops' clock (loadNow): now is loadNow
	// less it, so that a loop's callback reads the clock once for both.
	startLoad int64
	health    health
	// wallStart is start as nanoseconds since the Unix epoch: Clock's
	// anchor.
	wallStart int64
	log       logger

	loops     *loopGroup   // the gnet loops its connections run on; nil with BackendNet
	ln        net.Listener // nil if it does not listen
	links     sync.WaitGroup
	addr      string
	tlsServer *tls.Config
	sec       securityCounters

	timers     *timers
	faultN     faultCounters
	faultSched faultSchedule
	connSeq    atomic.Uint64
	// lastDirect is when a sender's direct write to any of its
	// connections last ended (see directGap).
	lastDirect atomic.Int64
	closing    atomic.Bool
	stopping   chan struct{} // closed once shutdown has closed the connections
	closed     chan struct{}
	bgDone     sync.WaitGroup
	// closers counts the goroutines of Close calls made on an event loop
	// while they flush (see closeInBackground).
	closers sync.WaitGroup

	mu struct {
		sync.Mutex
		peers   map[string]*Peer
		conns   map[*conn]struct{}
		inboxes map[taskid.ID]*inbox
		recv    map[pair]*recvState
		perAddr map[string]int // accepted connections by remote host
		closed  bool
		// resume is, by address, where the channels of a peer closed
		// there would go on (see Peer.Close), until a new peer takes it.
		resume map[string]map[taskid.Channel]uint64

		newHandler func(taskid.ID) Handler
		newInline  bool // newHandler's handlers run inline
		// gone sums the counters of the connections closed, so that
		// Stats stays cumulative. A connection leaves conns and joins
		// gone under the one lock, and Stats reads both under it, so
		// that it counts each connection once.
		gone ConnStats
	}
}

// NewNode starts a node: its dialing event loops, and its listener if
// [WithListen] is given.
func NewNode(opts ...Option) (*Node, error) {
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.validate(); err != nil {
		return nil, err
	}
	if o.nodeID == 0 {
		o.nodeID = rand.Uint64() | 1
	}
	if o.epoch == 0 {
		o.epoch = uint64(time.Now().UnixNano())
	}
	n := &Node{o: o, id: o.nodeID, epoch: o.epoch, start: time.Now(), stopping: make(chan struct{}), closed: make(chan struct{})}
	n.wallStart = n.start.UnixNano()
	n.startLoad = int64(n.start.Sub(loadEpoch))
	n.log = logger{o.logger}
	n.mu.peers = make(map[string]*Peer)
	n.mu.resume = make(map[string]map[taskid.Channel]uint64)
	n.mu.conns = make(map[*conn]struct{})
	n.mu.inboxes = make(map[taskid.ID]*inbox)
	n.mu.recv = make(map[pair]*recvState)
	n.mu.perAddr = make(map[string]int)
	if o.deferFaults {
		n.faultSched.from.Store(faultClockStopped)
	}
	n.timers = newTimers(n)
	if o.backend == BackendNet && o.tls != nil {
		n.tlsServer = o.tls.Clone()
		n.tlsServer.MinVersion = tls.VersionTLS13
	}
	if o.backend == BackendGnet {
		g, err := acquireLoops(o.eventLoops)
		if err != nil {
			return nil, err
		}
		n.loops = g
	}
	if o.listen != "" {
		if err := n.listen(o.listen); err != nil {
			if n.loops != nil {
				n.loops.release()
			}
			return nil, err
		}
	}
	n.bgDone.Add(1)
	go n.timers.run()
	return n, nil
}

// listen accepts connections on addr. Accepting parks in Go's netpoller on
// either backend; an accepted connection then runs on the node's backend
// (see Node.run).
func (n *Node) listen(addr string) error {
	lc := net.ListenConfig{Control: n.sizeSocket} // accepted sockets inherit the sizes
	ln, err := lc.Listen(context.Background(), "tcp", addr)
	if err != nil {
		return fmt.Errorf("transport: listening on %s: %w", addr, err)
	}
	n.ln = ln
	n.addr = ln.Addr().String()
	n.bgDone.Add(1)
	go func() {
		defer n.bgDone.Done()
		for {
			nc, err := ln.Accept()
			if err != nil {
				if n.closing.Load() || errors.Is(err, net.ErrClosed) {
					return
				}
				time.Sleep(5 * time.Millisecond) // out of descriptors, say
				continue
			}
			n.accept(nc)
		}
	}()
	return nil
}

func (n *Node) accept(nc net.Conn) {
	c := newConn(n, nil, 0)
	c.remote = nc.RemoteAddr().String()
	if !n.admit(c) {
		if n.tlsServer == nil {
			_ = nc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
			_, _ = nc.Write(n.refusal())
		}
		_ = nc.Close()
		return
	}
	if n.tlsServer != nil {
		nc = tls.Server(nc, n.tlsServer)
	}
	if !n.track(c) {
		n.release(c)
		_ = nc.Close()
		return
	}
	if err := n.run(nc, c); err != nil {
		n.log.Warn("sluice: could not start an accepted connection", "remote", c.remote, "err", err)
	}
}

// run runs the tracked conn c over the connected socket nc: on gnet, nc
// is enrolled in the node's loop group (which takes a duplicate of its
// descriptor and closes nc); on the net backend, a netLink's goroutines
// run it. On an error c is forgotten and nc closed.
func (n *Node) run(nc net.Conn, c *conn) error {
	if n.loops == nil {
		defer n.links.Done() // track's count: the link's goroutines count now
		l := newNetLink(nc, c, &n.links)
		if !c.setLink(l, -1) {
			_ = nc.Close() // closed by its node shutting down, before it had a link
			return nil
		}
		n.timers.watchHandshake(c)
		l.start(c.opening())
		return nil
	}
	err := n.loops.enroll(nc, c) // links counts c since track
	if err == nil && c.load.Load() == nil {
		err = errors.New("transport: the event loop did not take the connection")
	}
	if err != nil {
		n.links.Done()
		n.forget(c)
		return err
	}
	return nil
}

// sizeSocket gives a socket the buffers of WithSocketBuffers before it
// connects or listens (a net.Dialer's or net.ListenConfig's Control; an
// accepted socket inherits its listener's). Linux fixes a connection's
// window scale, and the window its peer sizes its segments by, when the
// connection opens: buffers made smaller after that left the peer with
// segments larger than the window could ever hold, sent only as the
// zero-window probes' backoff allowed, once every few seconds, so two
// nodes with 8 KiB buffers opening 3,000 channels at once stalled for
// over a minute in one run of five to thirteen with the CPUs busy. Best
// effort: a socket without them works with the kernel's sizes.
func (n *Node) sizeSocket(_, _ string, rc syscall.RawConn) error {
	b := n.o.socketBuffer
	if b <= 0 {
		return nil
	}
	return rc.Control(func(fd uintptr) {
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF, b)
		_ = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF, b)
	})
}

// admit counts an accepted connection against the limit of connections
// per remote host, and reports whether it is within it.
func (n *Node) admit(c *conn) bool {
	host, _, err := net.SplitHostPort(c.remote)
	if err != nil {
		host = c.remote
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.perAddr[host] >= n.o.maxConnsPerAddr {
		n.sec.connLimit.Add(1)
		n.log.Warn("sluice: refusing a connection: too many from its address", "remote", c.remote, "limit", n.o.maxConnsPerAddr)
		return false
	}
	n.mu.perAddr[host]++
	c.addrKey = host
	return true
}

func (n *Node) release(c *conn) {
	if c.addrKey == "" {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.perAddr[c.addrKey]--; n.mu.perAddr[c.addrKey] <= 0 {
		delete(n.mu.perAddr, c.addrKey)
	}
	c.addrKey = ""
}

// refusal is what a connection over the per-address limit gets: a preface,
// so that the peer reads a GOAWAY and not garbage, and GOAWAY LIMIT.
func (n *Node) refusal() []byte {
	b := wire.AppendPreface(nil, wire.Preface{Version: wire.Version, NodeID: n.id})
	return wire.AppendGoAway(b, wire.GoAway{Code: wire.GoAwayLimit,
		Message: fmt.Sprintf("too many connections from one address (limit %d)", n.o.maxConnsPerAddr)})
}

// Addr is the address the node listens on, with the port the system chose
// for ":0"; empty if it does not listen.
func (n *Node) Addr() string { return n.addr }

// Faults returns the faults the node injects ([WithFaults]). Safe for
// concurrent use.
func (n *Node) Faults() Faults { return n.o.faults }

// StartFaultClock starts the fault clock of a node made with
// [WithDeferredFaultClock]: the partition of [WithFaults] is due
// PartitionAt after this call, and the first reset Reset after it.
// A load generator calls it when its measured run begins, so that the
// timed faults fall in the run whatever the setup before it (dialing,
// handshakes) took. It reports whether it started the clock: it does
// nothing once the clock has started, and the clock of a node made without
// that option started with the node. Safe for concurrent use.
func (n *Node) StartFaultClock() bool { return n.faultSched.startClock(n.now()) }

// ID is the node id announced to peers.
func (n *Node) ID() uint64 { return n.id }

// MaxPayload is the largest payload a channel of this node takes: its
// window's bytes ([WithWindow]) less the largest message head, and less a
// run header more if [WithMaxFrame] is smaller than the window (a message
// goes in one frame). Send and TrySend refuse a larger one with ErrTooLarge.
func (n *Node) MaxPayload() int { return maxPayload(&n.o) }

// Epoch is the epoch of channels opened without an explicit one.
func (n *Node) Epoch() uint64 { return n.epoch }

// now is the node's clock: nanoseconds since it started, monotonic.
func (n *Node) now() int64 { return loadNow() - n.startLoad }

// Handle registers the handler of messages for target. Messages that
// arrive before it is registered wait in the target's inbox, and their
// sources wait for credit. Registering a second handler for the same target
// is an error.
func (n *Node) Handle(target taskid.ID, h Handler) error {
	return n.handle(target, h, false)
}

// HandleInline registers h like [Node.Handle], but h runs on the event
// loop of the connection the messages arrive on, as they are decoded,
// instead of on a goroutine of the target's own: no hand-off, no copy of the
// payloads (they point into the connection's read buffer, valid until h
// returns), and the messages count as consumed as soon as h returns. That
// is how a plain TCP reader works, and it is the fastest way in; the price
// is that h must be quick and must never block: no blocking Send (use
// TrySend), no I/O, no waiting for other tasks, because while it runs the
// connection reads nothing else. Calls are still one run at a time per
// target, in order per channel; runs from several connections are
// serialized, so they may come from different goroutines. A task whose
// handler can block (one that emits with Send, or waits for credit) must
// use Handle. Runs that arrived before h was registered (they wait in the
// target's inbox, copied) are given to it first, in order, on a goroutine
// of the node's as [Node.Handle]'s are, and the runs after them inline;
// HandleInline does not wait for them. Once the node shuts down, inline
// handlers are given nothing more. An inline handler may still close its
// node: Close and Abort, which cannot wait on the loop, return at once and
// finish in the background (see [Node.Close]).
func (n *Node) HandleInline(target taskid.ID, h Handler) error {
	return n.handle(target, h, true)
}

func (n *Node) handle(target taskid.ID, h Handler, inline bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.closed {
		return ErrClosed
	}
	if h == nil { // refused before it makes an inbox, which HandleAll would then not supply
		return fmt.Errorf("transport: nil handler for task %v", target)
	}
	in, _ := n.inboxLocked(target)
	return n.startInboxLocked(in, h, inline)
}

// HandleAll makes newHandler supply the handler of every target task that
// has none when its first channel opens, for receivers that do not know
// their tasks in advance (loadgen serve). newHandler is asked once per
// target, without the node's lock: it may call the node (a task opening
// its outputs with [Node.Peer]). A nil newHandler supplies none from then
// on: targets wait for [Node.Handle]. Once the node is closing it does
// nothing.
func (n *Node) HandleAll(newHandler func(target taskid.ID) Handler) {
	n.handleAll(newHandler, false)
}

// HandleAllInline is [Node.HandleAll] with handlers that run inline, as
// [Node.HandleInline] describes.
func (n *Node) HandleAllInline(newHandler func(target taskid.ID) Handler) {
	n.handleAll(newHandler, true)
}

func (n *Node) handleAll(newHandler func(target taskid.ID) Handler, inline bool) {
	n.mu.Lock()
	if n.mu.closed {
		n.mu.Unlock()
		return
	}
	n.mu.newHandler, n.mu.newInline = newHandler, inline
	var waiting []*inbox
	for _, in := range n.mu.inboxes {
		in.mu.Lock()
		has := in.mu.handler != nil
		in.mu.Unlock()
		if newHandler != nil && !has && !in.supplying {
			in.supplying = true
			waiting = append(waiting, in)
		}
	}
	n.mu.Unlock()
	for _, in := range waiting {
		n.supply(in, newHandler, inline)
	}
}

// supply gives in, whose supplying the caller set, the handler newHandler
// makes for its target, unless the target got one meanwhile or the node is
// closing. newHandler runs without n.mu: it may call the node (a task
// opening its outputs with Node.Peer, say).
func (n *Node) supply(in *inbox, newHandler func(target taskid.ID) Handler, inline bool) {
	h := newHandler(in.target)
	n.mu.Lock()
	defer n.mu.Unlock()
	in.supplying = false
	if !n.mu.closed {
		_ = n.startInboxLocked(in, h, inline)
	}
}

func (n *Node) startInboxLocked(in *inbox, h Handler, inline bool) error {
	if h == nil {
		return fmt.Errorf("transport: nil handler for task %v", in.target)
	}
	in.mu.Lock()
	err := in.setHandlerLocked(h)
	in.mu.Unlock()
	if err != nil {
		return err
	}
	run := in.run
	if inline {
		if in.goInline(h) {
			return nil
		}
		run = in.runThenInline // runs wait: delivered first, as Handle's are
	}
	n.bgDone.Add(1)
	go func() {
		defer in.leave(n)
		in.goid.Store(goid())
		run(h)
	}()
	return nil
}

// inboxLocked returns target's inbox, made without a handler if it is new,
// and whether it is new.
func (n *Node) inboxLocked(target taskid.ID) (in *inbox, made bool) {
	in, ok := n.mu.inboxes[target]
	if !ok {
		in = newInbox(target)
		n.mu.inboxes[target] = in
	}
	return in, !ok
}

// recvState returns the receiving state of (source, target), made on the
// pair's first OPEN; it fails with taskid.ErrTooManyChannels when that
// would pass the limit of [WithMaxReceivers], and with ErrClosed once the
// node is shutting down: a loop goes on decoding OPENs until shutdown
// closes its connection, and the target inbox a new pair may start would
// be missing from the inboxes shutdown stops and waits for.
func (n *Node) recvState(source, target taskid.ID) (*recvState, error) {
	n.mu.Lock()
	k := pair{source, target}
	if rs, ok := n.mu.recv[k]; ok {
		n.mu.Unlock()
		return rs, nil
	}
	if n.mu.closed {
		n.mu.Unlock()
		return nil, fmt.Errorf("%w: node shutting down, not opening %v -> %v", ErrClosed, source, target)
	}
	if len(n.mu.recv) >= n.o.maxReceivers {
		n.mu.Unlock()
		return nil, fmt.Errorf("%w: %v -> %v would be this node's receiving pair number %d, over its limit (WithMaxReceivers)",
			taskid.ErrTooManyChannels, source, target, len(n.mu.recv)+1)
	}
	in, made := n.inboxLocked(target)
	newHandler, inline := n.mu.newHandler, n.mu.newInline
	supply := made && newHandler != nil // the target's first channel: HandleAll supplies its handler
	if supply {
		in.supplying = true
	}
	rs := &recvState{key: k, inbox: in}
	rs.mu.r = lossdetect.NewReceiver()
	n.mu.recv[k] = rs
	n.mu.Unlock()
	if supply {
		n.supply(in, newHandler, inline)
	}
	return rs, nil
}

// Peer returns the peer at addr ("host:port", the port a number from 1 to
// 65535 or a service name the system knows), dialing it if it is new or
// was closed ([Peer.Close]). An address of another form is refused here,
// rather than dialed in vain until a context ends. The connection comes up
// in the background; see [Peer.WaitConnected].
func (n *Node) Peer(addr string) (*Peer, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("transport: peer address %q: %w", addr, err)
	}
	if p, err := net.LookupPort("tcp", port); err != nil || p == 0 {
		return nil, fmt.Errorf("transport: peer address %q: port %q is not a number from 1 to 65535 or a known service", addr, port)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.closed {
		return nil, ErrClosed
	}
	p, ok := n.mu.peers[addr]
	if !ok {
		p = newPeer(n, addr, n.mu.resume[addr])
		delete(n.mu.resume, addr)
		n.mu.peers[addr] = p
	}
	return p, nil
}

// track counts c among the node's connections, unless the node is
// closing. It also counts c in links, under mu, so that shutdown, which
// sets closed before it waits for links, never waits while a connection
// is being added: on gnet the close callback that follows every open one
// gives it back (or run, if the loop never took the connection); on the
// net backend run does, once the link's goroutines count.
func (n *Node) track(c *conn) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.closed {
		return false
	}
	n.mu.conns[c] = struct{}{}
	n.links.Add(1)
	return true
}

func (n *Node) forget(c *conn) {
	n.release(c)
	n.mu.Lock()
	if _, ok := n.mu.conns[c]; ok {
		delete(n.mu.conns, c)
		n.mu.gone.add(c.snapshot())
	}
	n.mu.Unlock()
	n.timers.forgetConn(c)
}

// abort closes c from any goroutine.
func (n *Node) abort(c *conn, err error) {
	c.close(err)
	c.mu.Lock()
	lk := c.lk // set by the loop that opens c (setLink)
	c.mu.Unlock()
	if lk != nil {
		_ = lk.Close()
	}
}

// Close shuts the node down gracefully: it waits, until ctx ends, for every
// message sent to be acknowledged, tells its peers with GOAWAY, and closes
// everything. It returns ctx's error if it had to drop unacknowledged
// messages; messages to a peer that refused this node, which no ack will
// ever come for, it drops without waiting, and returns that refusal
// (errors.Is ErrRejected). Once it returns, the node's goroutines have
// ended and no handler runs, but one that closed the node itself and has
// yet to return.
//
// A handler may close its node, on a fatal error say. From a handler of
// [Node.Handle], Close does all of the above but wait for that handler:
// the handler is given nothing more, and its goroutine ends when it
// returns. A message the node sends to that very task cannot be consumed
// meanwhile: Close then waits for its ack until ctx ends. From an inline
// handler ([Node.HandleInline], and any function that runs on an event
// loop), Close cannot wait at all, since closing connections needs the
// loop the handler holds: it returns nil at once, and the node flushes,
// until ctx ends (a ctx cancelled when the handler returns drops what is
// unacknowledged), and shuts down in the background, logging what it
// dropped; handlers go on receiving until the flush ends. A later Close or
// Abort from elsewhere waits for the shutdown to finish.
func (n *Node) Close(ctx context.Context) error {
	g := goid()
	if onLoop(g) {
		n.closeInBackground(ctx)
		return nil
	}
	n.leaveHandler(g)
	err := n.flush(ctx)
	n.shutdown(wire.GoAwayShutdown)
	return err
}

// flush waits, until ctx ends, for every message sent to every peer to be
// acknowledged.
func (n *Node) flush(ctx context.Context) error {
	var err error
	for _, p := range n.peers() {
		if e := p.flush(ctx); e != nil && err == nil {
			err = e
		}
	}
	return err
}

// closeInBackground is Close for a caller on an event loop: a goroutine
// flushes and shuts the node down once the loop is free. It counts in
// closers while it flushes, so that a shutdown that another caller
// finishes meanwhile waits for it; its own shutdown it leaves to whoever
// finishes it.
func (n *Node) closeInBackground(ctx context.Context) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.closed {
		return
	}
	n.closers.Add(1)
	go func() {
		err := n.flush(ctx)
		if err != nil {
			n.log.Warn("sluice: closing the node (Close on an event loop) dropped unacknowledged messages", "err", err)
		}
		n.closers.Done()
		n.shutdown(wire.GoAwayShutdown)
	}()
}

// Abort closes the node at once, dropping unacknowledged messages. Once it
// returns, the node's goroutines have ended and no handler runs, but one
// that closed the node itself and has yet to return.
//
// From a handler of [Node.Handle], Abort does not wait for that handler:
// the handler is given nothing more, and its goroutine ends when it
// returns. From an inline handler ([Node.HandleInline], and any function
// that runs on an event loop) Abort closes the node's connections, peers
// and senders and returns at once, and no handler is given anything more;
// what waits for the loop (the connections' ends, the node's goroutines)
// finishes in the background once the handler returns. A later Close or
// Abort from elsewhere waits for it.
func (n *Node) Abort() {
	g := goid()
	if onLoop(g) {
		if n.beginShutdown(wire.GoAwayShutdown) {
			go n.finishShutdown()
		}
		return
	}
	n.leaveHandler(g)
	n.shutdown(wire.GoAwayShutdown)
}

// Stopping is closed once the node has begun to shut down (Close or Abort)
// and has closed its connections, before Close and Abort wait for the
// handlers of Handle to return. A handler that blocks on work of its own
// (waiting for an application to take a message) watches it to return in
// time: what it returns after Stopping is closed is never acknowledged to
// its sources, which keep those messages as unacknowledged.
func (n *Node) Stopping() <-chan struct{} { return n.stopping }

func (n *Node) peers() []*Peer {
	n.mu.Lock()
	defer n.mu.Unlock()
	ps := make([]*Peer, 0, len(n.mu.peers))
	for _, p := range n.mu.peers {
		ps = append(ps, p)
	}
	return ps
}

// leaveHandler lets go of g, the calling goroutine, if it runs a handler
// of the node's (a handler closing its node): shutdown does not wait for
// it, and it delivers nothing more once the handler returns.
func (n *Node) leaveHandler(g uint64) {
	if g == 0 {
		return
	}
	var mine *inbox
	n.mu.Lock()
	for _, in := range n.mu.inboxes {
		if in.goid.Load() == g {
			mine = in
			break
		}
	}
	n.mu.Unlock()
	if mine != nil {
		mine.leave(n)
	}
}

// shutdown closes the node and waits until everything has ended; it waits
// for a shutdown that began elsewhere to finish. It never runs on an event
// loop, which it would wait for.
func (n *Node) shutdown(code wire.GoAwayCode) {
	if !n.beginShutdown(code) {
		<-n.closed
		return
	}
	n.finishShutdown()
}

// beginShutdown closes the node's connections, peers, senders and inboxes
// without waiting for anything, so that it may run on an event loop, and
// reports whether it did: false if the shutdown began before.
func (n *Node) beginShutdown(code wire.GoAwayCode) bool {
	if n.closing.Swap(true) {
		return false
	}
	n.mu.Lock()
	n.mu.closed = true
	conns := make([]*conn, 0, len(n.mu.conns))
	for c := range n.mu.conns {
		conns = append(conns, c)
	}
	inboxes := make([]*inbox, 0, len(n.mu.inboxes))
	for _, in := range n.mu.inboxes {
		inboxes = append(inboxes, in)
	}
	n.mu.Unlock()
	if hook := testHookShutdownBegun.Load(); hook != nil {
		(*hook)(n)
	}
	goaway := wire.AppendGoAway(nil, wire.GoAway{Code: code, Message: "node shutting down"})
	for _, c := range conns {
		if c.state.Load() == stOpen {
			_ = c.lk.Execute(func() { c.writeLast(goaway) })
		}
	}
	for _, p := range n.peers() {
		p.close(nil, false) // finishShutdown waits for their dial loops (bgDone)
	}
	for _, c := range conns {
		n.abort(c, ErrClosed)
	}
	close(n.stopping)
	n.timers.close()
	for _, in := range inboxes {
		in.stop()
	}
	if n.ln != nil {
		_ = n.ln.Close()
	}
	return true
}

// testHookShutdownBegun, set only by tests, runs in beginShutdown once the
// node is marked closed, before it closes its connections and peers.
var testHookShutdownBegun atomic.Pointer[func(*Node)]

// finishShutdown waits for what beginShutdown closed to end: the
// connections' close callbacks, the node's goroutines (listener, timers,
// dial loops, inboxes but one a handler closing its node left) and the
// flushes of Close calls made on an event loop; then it gives back the
// event loops and marks the node closed.
func (n *Node) finishShutdown() {
	n.links.Wait()
	n.bgDone.Wait()
	n.closers.Wait()
	if n.loops != nil {
		n.loops.release()
	}
	close(n.closed)
}
