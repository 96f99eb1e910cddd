package transport

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
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
	o      options
	id     uint64
	epoch  uint64
	start  time.Time
	health health
	// wallStart is start as nanoseconds since the Unix epoch: Clock's
	// anchor.
	wallStart int64
	log       logger

	server     gnet.Engine
	serverDone chan error
	client     *gnet.Client // nil with BackendNet
	netLn      net.Listener // the listener of BackendNet
	links      sync.WaitGroup
	addr       string
	tlsServer  *tls.Config
	sec        securityCounters

	timers  *timers
	faultN  faultCounters
	connSeq atomic.Uint64
	closing atomic.Bool
	closed  chan struct{}
	bgDone  sync.WaitGroup

	mu struct {
		sync.Mutex
		peers   map[string]*Peer
		conns   map[*conn]struct{}
		inboxes map[taskid.ID]*inbox
		recv    map[pair]*recvState
		perAddr map[string]int // accepted connections by remote host
		closed  bool

		newHandler func(taskid.ID) Handler
		newInline  bool // newHandler's handlers run inline
	}
	// counters of connections already closed, so Stats stays cumulative
	gone struct {
		sync.Mutex
		s ConnStats
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
	n := &Node{o: o, id: o.nodeID, epoch: o.epoch, start: time.Now(), closed: make(chan struct{})}
	n.wallStart = n.start.UnixNano()
	n.health.stalled = make(map[*channel]struct{})
	n.health.slow = make(map[*Peer]struct{})
	n.log = logger{o.logger}
	n.mu.peers = make(map[string]*Peer)
	n.mu.conns = make(map[*conn]struct{})
	n.mu.inboxes = make(map[taskid.ID]*inbox)
	n.mu.recv = make(map[pair]*recvState)
	n.mu.perAddr = make(map[string]int)
	n.timers = newTimers(n)
	if o.backend == BackendNet {
		if o.tls != nil {
			n.tlsServer = o.tls.Clone()
			n.tlsServer.MinVersion = tls.VersionTLS13
		}
		if o.listen != "" {
			if err := n.listenNet(o.listen); err != nil {
				return nil, err
			}
		}
		n.bgDone.Add(1)
		go n.timers.run()
		return n, nil
	}

	gopts := []gnet.Option{
		gnet.WithMulticore(o.eventLoops > 1),
		gnet.WithNumEventLoop(o.eventLoops),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		gnet.WithReadBufferCap(256 << 10),
		gnet.WithWriteBufferCap(256 << 10),
		// On the listening socket (accepted ones inherit them) and on
		// every dialed one; 0 leaves the kernel's.
		gnet.WithSocketSendBuffer(o.socketBuffer),
		gnet.WithSocketRecvBuffer(o.socketBuffer),
		gnet.WithLogger(n.log),
		gnet.WithReuseAddr(true),
	}
	cli, err := gnet.NewClient(&loopHandler{n: n}, gopts...)
	if err != nil {
		return nil, fmt.Errorf("transport: starting the dialing loops: %w", err)
	}
	if err := cli.Start(); err != nil {
		return nil, fmt.Errorf("transport: starting the dialing loops: %w", err)
	}
	n.client = cli
	if o.listen != "" {
		if err := n.listen(o.listen, gopts); err != nil {
			_ = cli.Stop()
			return nil, err
		}
	}
	n.bgDone.Add(1)
	go n.timers.run()
	return n, nil
}

// listenNet listens with the net backend: one goroutine accepts, each
// connection gets a netLink.
func (n *Node) listenNet(addr string) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("transport: listening on %s: %w", addr, err)
	}
	n.netLn = ln
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
			n.acceptNet(nc)
		}
	}()
	return nil
}

func (n *Node) acceptNet(nc net.Conn) {
	n.sizeSocket(nc)
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
	l := newNetLink(nc, c, &n.links)
	c.setLink(l, -1)
	n.timers.watchHandshake(c)
	l.start(c.opening())
}

// sizeSocket gives a net-backend connection the socket buffers of
// WithSocketBuffers. Best effort: a socket without them works with the
// kernel's sizes.
func (n *Node) sizeSocket(nc net.Conn) {
	tc, ok := nc.(*net.TCPConn)
	if b := n.o.socketBuffer; ok && b > 0 {
		_ = tc.SetReadBuffer(b)
		_ = tc.SetWriteBuffer(b)
	}
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

func (n *Node) listen(addr string, gopts []gnet.Option) error {
	booted := make(chan error, 1)
	h := &loopHandler{n: n, server: true, booted: booted}
	n.serverDone = make(chan error, 1)
	go func() {
		err := gnet.Run(h, "tcp://"+addr, gopts...)
		select {
		case booted <- err: // failed before boot
		default:
		}
		n.serverDone <- err
	}()
	if err := <-booted; err != nil {
		return fmt.Errorf("transport: listening on %s: %w", addr, err)
	}
	fd, err := n.server.Dup()
	if err != nil {
		return fmt.Errorf("transport: listening on %s: %w", addr, err)
	}
	defer unix.Close(fd)
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return fmt.Errorf("transport: listening on %s: %w", addr, err)
	}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		n.addr = net.JoinHostPort(net.IP(a.Addr[:]).String(), strconv.Itoa(a.Port))
	case *unix.SockaddrInet6:
		n.addr = net.JoinHostPort(net.IP(a.Addr[:]).String(), strconv.Itoa(a.Port))
	default:
		n.addr = addr
	}
	return nil
}

// Addr is the address the node listens on, with the port the system chose
// for ":0"; empty if it does not listen.
func (n *Node) Addr() string { return n.addr }

// Faults returns the faults the node injects ([WithFaults]). Safe for
// concurrent use.
func (n *Node) Faults() Faults { return n.o.faults }

// ID is the node id announced to peers.
func (n *Node) ID() uint64 { return n.id }

// Epoch is the epoch of channels opened without an explicit one.
func (n *Node) Epoch() uint64 { return n.epoch }

func (n *Node) now() int64 { return int64(time.Since(n.start)) }

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
// use Handle.
func (n *Node) HandleInline(target taskid.ID, h Handler) error {
	return n.handle(target, h, true)
}

func (n *Node) handle(target taskid.ID, h Handler, inline bool) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.closed {
		return ErrClosed
	}
	return n.startInboxLocked(n.inboxLocked(target), h, inline)
}

// HandleAll makes newHandler supply the handler of every target task that
// has none when its first channel opens, for receivers that do not know
// their tasks in advance (loadgen serve).
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
	defer n.mu.Unlock()
	n.mu.newHandler, n.mu.newInline = newHandler, inline
	for target, in := range n.mu.inboxes {
		in.mu.Lock()
		has := in.mu.handler != nil
		in.mu.Unlock()
		if !has {
			_ = n.startInboxLocked(in, newHandler(target), inline)
		}
	}
}

func (n *Node) startInboxLocked(in *inbox, h Handler, inline bool) error {
	if h == nil {
		return fmt.Errorf("transport: nil handler for task %v", in.target)
	}
	if inline {
		return in.goInline(h)
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if err := in.setHandlerLocked(h); err != nil {
		return err
	}
	n.bgDone.Add(1)
	go func() {
		defer n.bgDone.Done()
		in.run(h)
	}()
	return nil
}

func (n *Node) inboxLocked(target taskid.ID) *inbox {
	in, ok := n.mu.inboxes[target]
	if !ok {
		in = newInbox(target)
		n.mu.inboxes[target] = in
		if n.mu.newHandler != nil {
			_ = n.startInboxLocked(in, n.mu.newHandler(target), n.mu.newInline)
		}
	}
	return in
}

func (n *Node) recvState(source, target taskid.ID) *recvState {
	n.mu.Lock()
	defer n.mu.Unlock()
	k := pair{source, target}
	rs, ok := n.mu.recv[k]
	if !ok {
		rs = &recvState{key: k, inbox: n.inboxLocked(target)}
		rs.mu.r = lossdetect.NewReceiver()
		n.mu.recv[k] = rs
	}
	return rs
}

// Peer returns the peer at addr ("host:port"), dialing it if it is new.
// The connection comes up in the background; see [Peer.WaitConnected].
func (n *Node) Peer(addr string) (*Peer, error) {
	if _, _, err := net.SplitHostPort(addr); err != nil {
		return nil, fmt.Errorf("transport: peer address %q: %w", addr, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.closed {
		return nil, ErrClosed
	}
	p, ok := n.mu.peers[addr]
	if !ok {
		p = newPeer(n, addr)
		n.mu.peers[addr] = p
	}
	return p, nil
}

func (n *Node) track(c *conn) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.mu.closed {
		return false
	}
	n.mu.conns[c] = struct{}{}
	return true
}

func (n *Node) forget(c *conn) {
	n.release(c)
	n.mu.Lock()
	_, ok := n.mu.conns[c]
	delete(n.mu.conns, c)
	n.mu.Unlock()
	if ok {
		s := c.snapshot()
		n.gone.Lock()
		n.gone.s.add(s)
		n.gone.Unlock()
	}
	n.timers.forgetConn(c)
}

// abort closes c from any goroutine.
func (n *Node) abort(c *conn, err error) {
	c.close(err)
	if c.lk != nil {
		_ = c.lk.Close()
	}
}

// Close shuts the node down gracefully: it waits, until ctx ends, for every
// message sent to be acknowledged, tells its peers with GOAWAY, and closes
// everything. It returns ctx's error if it had to drop unacknowledged
// messages.
func (n *Node) Close(ctx context.Context) error {
	var err error
	for _, p := range n.peers() {
		if e := p.flush(ctx); e != nil && err == nil {
			err = e
		}
	}
	n.shutdown(wire.GoAwayShutdown)
	return err
}

// Abort closes the node at once, dropping unacknowledged messages.
func (n *Node) Abort() { n.shutdown(wire.GoAwayShutdown) }

func (n *Node) peers() []*Peer {
	n.mu.Lock()
	defer n.mu.Unlock()
	ps := make([]*Peer, 0, len(n.mu.peers))
	for _, p := range n.mu.peers {
		ps = append(ps, p)
	}
	return ps
}

func (n *Node) shutdown(code wire.GoAwayCode) {
	if n.closing.Swap(true) {
		<-n.closed
		return
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
	goaway := wire.AppendGoAway(nil, wire.GoAway{Code: code, Message: "node shutting down"})
	for _, c := range conns {
		if c.state.Load() == stOpen {
			_ = c.lk.Execute(func() { c.writeLast(goaway) })
		}
	}
	for _, p := range n.peers() {
		p.close()
	}
	for _, c := range conns {
		n.abort(c, ErrClosed)
	}
	n.timers.close()
	for _, in := range inboxes {
		close(in.stop)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if n.serverDone != nil {
		_ = n.server.Stop(ctx)
		<-n.serverDone
	}
	if n.netLn != nil {
		_ = n.netLn.Close()
	}
	if n.client != nil {
		_ = n.client.Stop()
	}
	n.links.Wait()
	n.bgDone.Wait()
	close(n.closed)
}

// loopHandler receives gnet's events for the accepting (server) or dialing
// (client) loops.
type loopHandler struct {
	gnet.BuiltinEventEngine
	n      *Node
	server bool
	booted chan error
}

func (h *loopHandler) OnBoot(eng gnet.Engine) gnet.Action {
	if h.server {
		h.n.server = eng
		h.booted <- nil
	}
	return gnet.None
}

func (h *loopHandler) OnOpen(gc gnet.Conn) ([]byte, gnet.Action) {
	n := h.n
	var c *conn
	if h.server {
		c = newConn(n, nil, 0)
		c.remote = gc.RemoteAddr().String()
		if !n.admit(c) {
			return n.refusal(), gnet.Close
		}
		if !n.track(c) {
			n.release(c)
			return nil, gnet.Close
		}
		gc.SetContext(c)
	} else {
		var ok bool
		if c, ok = gc.Context().(*conn); !ok {
			return nil, gnet.Close
		}
	}
	c.setLink(gnetLink{gc}, gc.Fd())
	n.timers.watchHandshake(c)
	return c.opening(), gnet.None
}

func (h *loopHandler) OnTraffic(gc gnet.Conn) gnet.Action {
	c, ok := gc.Context().(*conn)
	if !ok {
		return gnet.Close
	}
	a := gnet.None
	if !c.onTraffic() {
		a = gnet.Close
	}
	// gnet's loop goes back to epoll_wait next, a system call in which its
	// thread keeps its P until the runtime's monitor takes it back (20 µs to
	// 10 ms later). A goroutine this callback woke (a sender given credit,
	// an inbox given a run, a task's waiter) sits in this P's run queue
	// meanwhile. Yielding here runs it now; the loop resumes right after.
	// On two cores it raised one channel's throughput by a fifth to a third.
	runtime.Gosched()
	return a
}

func (h *loopHandler) OnClose(gc gnet.Conn, err error) gnet.Action {
	if c, ok := gc.Context().(*conn); ok {
		if err == nil {
			err = errors.New("closed by peer")
		}
		c.close(err)
	}
	return gnet.None
}
