package transport

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"runtime"
	"sync"

	"github.com/panjf2000/gnet/v2"
)

// The gnet backend's threading model.
//
// A gnet event loop waits for its sockets in epoll_wait, a blocking system
// call, and Go's runtime lets a thread in a system call keep its P (its
// right to run Go code) until the runtime's monitor, sysmon, takes it back:
// 20 µs later when sysmon is busy, up to 10-20 ms later once it has backed
// off, which it does whenever it finds nothing to take for a millisecond.
// While every P sits in an epoll_wait, nothing in the process runs Go code
// that is not already running: a timer that fires (a fixed-rate producer's
// next send, a checkpoint), a goroutine the netpoller wakes, a goroutine
// readied from a thread without a P. runtime/trace shows exactly that on two
// cores with a loop per side per node: goroutines runnable for 10-20 ms
// while both Ps belong to threads blocked in epoll_wait, and the fixed-rate
// p99 of a transport at 100 k msgs/s at 14-15 ms where the net backend,
// whose connections park in Go's netpoller without a P, reads 1-2 ms.
// More Ps (GOMAXPROCS above the core count) hide it at a third of the
// throughput: the extra threads then compete for the cores while they run.
//
// So a process's gnet connections share one group of loops, sized to leave
// at least one P that no loop can hold: GOMAXPROCS-1 loops, at least one.
// Every node in the process (two nodes of a benchmark, the nodes of an
// in-process engine) enrolls its connections there; listening and dialing
// go through Go's netpoller (an accept or a dial parks without a P) and the
// connection is handed to the group once it exists. A node that asks for
// its own number of loops ([WithEventLoops]) shares a group with the nodes
// that ask for the same number.

// loopGroup is a set of gnet event loops shared by the nodes of a process.
type loopGroup struct {
	cli   *gnet.Client
	h     *loopHandler
	loops int
	refs  int // nodes using it; under groups.mu
}

var groups struct {
	mu sync.Mutex
	m  map[int]*loopGroup
}

// defaultEventLoops is the number of loops of the default group: all Ps but
// one, so that one P is always free of loops blocked in epoll_wait.
func defaultEventLoops() int { return max(1, runtime.GOMAXPROCS(0)-1) }

// acquireLoops returns the process's group of n loops (0: the default
// number), starting it if no node uses one. Each call is paired with one
// call of release.
func acquireLoops(n int) (*loopGroup, error) {
	if n == 0 {
		n = defaultEventLoops()
	}
	groups.mu.Lock()
	defer groups.mu.Unlock()
	if g := groups.m[n]; g != nil {
		g.refs++
		return g, nil
	}
	h := &loopHandler{loads: new(loopLoads)}
	cli, err := gnet.NewClient(h,
		gnet.WithMulticore(n > 1),
		gnet.WithNumEventLoop(n),
		gnet.WithTCPNoDelay(gnet.TCPNoDelay),
		gnet.WithReadBufferCap(256<<10),
		gnet.WithWriteBufferCap(256<<10),
		gnet.WithLogger(gnetLogger{}),
	)
	if err == nil {
		err = cli.Start()
	}
	if err != nil {
		return nil, fmt.Errorf("transport: starting %d event loops: %w", n, err)
	}
	g := &loopGroup{cli: cli, h: h, loops: n, refs: 1}
	if groups.m == nil {
		groups.m = make(map[int]*loopGroup)
	}
	groups.m[n] = g
	return g, nil
}

// release gives back a node's use of g; the last user stops its loops. The
// node has closed its connections and seen their close callbacks first.
func (g *loopGroup) release() {
	groups.mu.Lock()
	defer groups.mu.Unlock()
	if g.refs--; g.refs > 0 {
		return
	}
	delete(groups.m, g.loops)
	_ = g.cli.Stop()
	g.h.loads.forgetGoroutines()
}

// enroll hands the connected socket nc, whose conn is c, to one of the
// group's loops (the one with the fewest connections). The loop takes a
// duplicate of the descriptor and nc is closed. c's open callback has run
// when enroll returns without an error; with an error it never runs.
func (g *loopGroup) enroll(nc net.Conn, c *conn) error {
	_, err := g.cli.EnrollContext(nc, c)
	return err
}

// loopHandler receives gnet's events for every connection of a group. Each
// connection's context is its *conn, set when it was enrolled.
type loopHandler struct {
	gnet.BuiltinEventEngine
	loads *loopLoads // how busy each of the group's loops is
}

func (h *loopHandler) OnOpen(gc gnet.Conn) ([]byte, gnet.Action) {
	c, ok := gc.Context().(*conn)
	if !ok {
		return nil, gnet.Close
	}
	l := h.loads.of(gc.EventLoop())
	if l.goid == 0 {
		l.goid = goid()
		loopGoroutines.Store(l.goid, struct{}{})
	}
	l.enroll(c.node, +1)
	c.load.Store(l)
	if c.state.Load() == stClosed || !c.setLink(gnetLink{gc}, gc.Fd()) {
		return nil, gnet.Close // its node shut down while it was enrolled
	}
	c.node.timers.watchHandshake(c)
	return c.opening(), gnet.None
}

func (*loopHandler) OnTraffic(gc gnet.Conn) gnet.Action {
	c, ok := gc.Context().(*conn)
	if !ok {
		return gnet.Close
	}
	l := c.load.Load()
	start := l.begin()
	l.openDeferred()
	a := gnet.None
	if !c.onTraffic(start - c.node.startLoad) {
		a = gnet.Close
	}
	l.flushDeferred()
	l.done(start, loadNow())
	// A goroutine this callback woke (a sender given credit, an inbox given
	// a run, a task's waiter) waits in this P's run queue; gnet's loop next
	// polls without blocking and then blocks in epoll_wait, keeping the P.
	// Yielding here runs the woken goroutine now; the loop resumes right
	// after. On two cores it raised one channel's throughput by a fifth to
	// a third.
	runtime.Gosched()
	return a
}

func (*loopHandler) OnClose(gc gnet.Conn, err error) gnet.Action {
	c, ok := gc.Context().(*conn)
	if !ok {
		return gnet.None
	}
	if err == nil {
		err = errors.New("closed by peer")
	}
	c.close(err)
	if l := c.load.Load(); l != nil {
		l.enroll(c.node, -1)
	}
	c.node.links.Done()
	return gnet.None
}

// gnetLogger passes on what gnet logs as a warning or an error, through the
// default slog logger (the group serves every node of the process, so no
// one node's logger); its informational lines ("starting N loops") are
// dropped.
type gnetLogger struct{}

func (gnetLogger) Debugf(string, ...any) {}
func (gnetLogger) Infof(string, ...any)  {}
func (gnetLogger) Warnf(format string, args ...any) {
	slog.Warn("gnet: " + fmt.Sprintf(format, args...))
}
func (gnetLogger) Errorf(format string, args ...any) {
	slog.Error("gnet: " + fmt.Sprintf(format, args...))
}
func (gnetLogger) Fatalf(format string, args ...any) {
	slog.Error("gnet: " + fmt.Sprintf(format, args...))
}
