// How busy a gnet event loop is, and with whose work: the share of its
// time spent in the callbacks it runs for the connections (reading and
// dispatching what arrived, flushing what senders queued), averaged over
// loadWindow, and whether it runs the connections of more than one node. A
// sender reads it to decide whether to write a batch itself
// (conn.enqueue).

package transport

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/panjf2000/gnet/v2"
)

// loadWindow is how long a loop's load is averaged over, and how long a
// load stays current without a callback to update it.
const loadWindow = int64(time.Millisecond)

// loadBusy is the share of its time in callbacks above which a loop counts
// as busy. It matches the direct write's gap, which keeps a sender's
// direct writes to at most half its time: past half, the loop is the
// busier of the two writers.
const loadBusy = 0.5

// loadEpoch starts the clock of every loop's load: a process's loops are
// shared by its nodes, whose clocks (Node.now) each start with the node.
var loadEpoch = time.Now()

func loadNow() int64 { return int64(time.Since(loadEpoch)) }

// loopLoad is the load of one event loop. The loop updates it after each
// callback (done); senders read it (busyShared).
type loopLoad struct {
	// The loop's own: when its last callback ended, and the share of its
	// time it spent in callbacks, a moving average over loadWindow.
	lastEnd int64
	share   float64

	// Published for senders and Stats: share (math.Float64bits) as of at,
	// the end of the callback that set it, and when the latest callback
	// began (the loop is in it while in > at).
	pub atomic.Uint64
	at  atomic.Int64
	in  atomic.Int64

	// nodes counts the loop's open connections by node (loop only);
	// shared is set while they belong to more than one node.
	nodes  map[*Node]int
	shared atomic.Bool

	// goid is the id of the loop's goroutine, recorded at its first
	// connection (loop only), in loopGoroutines until the group stops.
	goid uint64

	// deferred holds, while the loop is in a connection's callback (open),
	// the loop's other connections scheduled to flush meanwhile, which
	// the loop flushes when the callback ends instead of being woken for
	// each (deferFlush).
	deferred struct {
		sync.Mutex
		open  bool
		conns []*conn
	}
}

// deferFlush puts c, just scheduled to flush (conn.scheduleLocked), on the
// list the loop flushes at the end of its current callback, and reports
// whether it did: false if the loop is not in a callback (it must be
// woken), and on a nil *loopLoad (a connection on no gnet loop). The
// caller holds c.mu.
func (l *loopLoad) deferFlush(c *conn) bool {
	if l == nil {
		return false
	}
	l.deferred.Lock()
	defer l.deferred.Unlock()
	if !l.deferred.open {
		return false
	}
	l.deferred.conns = append(l.deferred.conns, c)
	return true
}

// openDeferred starts a callback in which flushes are deferred; each is
// paired with flushDeferred at its end. Loop only.
func (l *loopLoad) openDeferred() {
	l.deferred.Lock()
	l.deferred.open = true
	l.deferred.Unlock()
}

// flushDeferred ends the callback that openDeferred began and flushes
// the connections scheduled during it. Loop only.
func (l *loopLoad) flushDeferred() {
	l.deferred.Lock()
	l.deferred.open = false
	conns := l.deferred.conns
	l.deferred.conns = l.deferred.conns[:0]
	l.deferred.Unlock()
	for i, c := range conns {
		c.flush()
		conns[i] = nil
	}
}

// enroll counts a connection of node n opening (+1) or closing (-1) on
// the loop. Loop only.
func (l *loopLoad) enroll(n *Node, delta int) {
	if l.nodes == nil {
		l.nodes = make(map[*Node]int)
	}
	if l.nodes[n] += delta; l.nodes[n] <= 0 {
		delete(l.nodes, n)
	}
	l.shared.Store(len(l.nodes) > 1)
}

// begin records that the loop starts a callback at start (loadNow), which
// it passes to done at the callback's end. Loop only.
func (l *loopLoad) begin() (start int64) {
	start = loadNow()
	l.in.Store(start)
	return start
}

// done records a callback that ran from start to end (loadNow). Loop only.
func (l *loopLoad) done(start, end int64) {
	span := end - l.lastEnd // the callback and the wait before it
	if l.lastEnd == 0 {
		span = end - start
	}
	l.lastEnd = end
	if span > 0 {
		// Each span weighs by its length: the average is over time, not
		// over callbacks, so many short callbacks and one long one count
		// alike.
		w := min(1, float64(span)/float64(loadWindow))
		l.share += w * (float64(end-start)/float64(span) - l.share)
		l.pub.Store(math.Float64bits(l.share))
	}
	l.at.Store(end) // the callback is over
}

// current returns the share of its time the loop spent in callbacks over
// the last loadWindow, at now (loadNow): 1 while it has been in one
// callback for that long, 0 once it has run none for that long (its last
// share is stale), else the share it published after its last callback.
// 0 on a nil *loopLoad (a connection on no gnet loop).
func (l *loopLoad) current(now int64) float64 {
	if l == nil {
		return 0
	}
	if in := l.in.Load(); in > l.at.Load() && now-in >= loadWindow {
		return 1
	}
	if now-l.at.Load() >= loadWindow {
		return 0
	}
	return math.Float64frombits(l.pub.Load())
}

// busyShared reports whether the loop runs connections of more than one
// node and has spent more than loadBusy of its time in callbacks lately
// (current), at now (loadNow). Safe on a nil *loopLoad: false.
func (l *loopLoad) busyShared(now int64) bool {
	return l != nil && l.shared.Load() && l.current(now) > loadBusy
}

// loopLoads maps a group's event loops to their loads.
type loopLoads struct {
	mu sync.Mutex
	m  map[gnet.EventLoop]*loopLoad
}

// forgetGoroutines takes the group's loops out of loopGoroutines once
// they have stopped.
func (ls *loopLoads) forgetGoroutines() {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	for _, l := range ls.m {
		if l.goid != 0 {
			loopGoroutines.Delete(l.goid)
		}
	}
}

// of returns the load of event loop el, made at its first connection.
func (ls *loopLoads) of(el gnet.EventLoop) *loopLoad {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	l := ls.m[el]
	if l == nil {
		if ls.m == nil {
			ls.m = make(map[gnet.EventLoop]*loopLoad)
		}
		l = new(loopLoad)
		ls.m[el] = l
	}
	return l
}
