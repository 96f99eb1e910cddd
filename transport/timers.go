package transport

import (
	"sync"
	"sync/atomic"
	"time"
)

// pollInterval is how soon a connection whose socket is backed up looks
// again: gnet says nothing when its outbound buffer drains.
const pollInterval = 50 * time.Microsecond

// housekeeping is the period of handshake and idle timeouts, pings and
// injected resets.
const housekeeping = 20 * time.Millisecond

// timers is the node's one timer goroutine. gnet's OnTick does not run on an
// event loop, so timer work that touches a connection's loop state is sent
// to the loop with Execute.
type timers struct {
	n    *Node
	kick chan struct{}
	stop chan struct{}

	mu struct {
		sync.Mutex
		chans     *wheel
		sleepTill int64           // when run will next look, if nothing pokes it
		conns     map[*conn]int64 // flush again at
		handshake map[*conn]struct{}
		closed    bool
	}
	// nextReset is when the next injected reset is due (node time; 0
	// until the fault clock has started). Housekeeping only.
	nextReset int64
}

func newTimers(n *Node) *timers {
	t := &timers{n: n, kick: make(chan struct{}, 1), stop: make(chan struct{})}
	t.mu.conns = make(map[*conn]int64)
	t.mu.handshake = make(map[*conn]struct{})
	t.mu.chans = newWheel(n.now())
	return t
}

type deadline struct {
	at int64
	ch *channel
}

// deadlineHeap is a binary min-heap of deadlines by time. It is typed,
// not container/heap, because boxing each deadline in an interface would
// allocate on every push and pop: with many channels that is garbage at the
// rate their timers fire.
type deadlineHeap []deadline

func (h *deadlineHeap) push(d deadline) {
	*h = append(*h, d)
	q := *h
	for i := len(q) - 1; i > 0; {
		parent := (i - 1) / 2
		if q[parent].at <= q[i].at {
			break
		}
		q[parent], q[i] = q[i], q[parent]
		i = parent
	}
}

// pop removes and returns the earliest deadline; the heap must not be empty.
func (h *deadlineHeap) pop() deadline {
	q := *h
	top := q[0]
	last := len(q) - 1
	q[0] = q[last]
	q[last] = deadline{} // drop the channel pointer
	q = q[:last]
	for i := 0; ; {
		l, small := 2*i+1, i
		if l < len(q) && q[l].at < q[small].at {
			small = l
		}
		if r := l + 1; r < len(q) && q[r].at < q[small].at {
			small = r
		}
		if small == i {
			break
		}
		q[i], q[small] = q[small], q[i]
		i = small
	}
	*h = q
	return top
}

func (t *timers) poke() {
	select {
	case t.kick <- struct{}{}:
	default:
	}
}

// wakeChannel makes the timer call ch.tick at about at.
func (t *timers) wakeChannel(ch *channel, at int64) {
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		return
	}
	t.mu.chans.add(deadline{at, ch})
	sooner := at < t.mu.sleepTill
	if sooner {
		t.mu.sleepTill = at // one poke is enough
	}
	t.mu.Unlock()
	if sooner {
		t.poke()
	}
}

// wakeConn makes the timer schedule a flush of c at about at (0: soon).
func (t *timers) wakeConn(c *conn, at int64) {
	if at == 0 {
		at = t.n.now() + int64(pollInterval)
	}
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		return
	}
	t.flushAtLocked(c, at)
	t.mu.Unlock()
	t.poke()
}

// flushAtLocked has the timer flush c at at, or sooner if it already
// would. The caller holds t.mu.
func (t *timers) flushAtLocked(c *conn, at int64) {
	if cur, ok := t.mu.conns[c]; !ok || at < cur {
		t.mu.conns[c] = at
	}
}

func (t *timers) watchHandshake(c *conn) {
	t.mu.Lock()
	if !t.mu.closed {
		t.mu.handshake[c] = struct{}{}
	}
	t.mu.Unlock()
}

func (t *timers) forgetConn(c *conn) {
	t.mu.Lock()
	delete(t.mu.conns, c)
	delete(t.mu.handshake, c)
	t.mu.Unlock()
}

func (t *timers) close() {
	t.mu.Lock()
	if t.mu.closed {
		t.mu.Unlock()
		return
	}
	t.mu.closed = true
	t.mu.Unlock()
	close(t.stop)
}

func (t *timers) run() {
	defer t.n.bgDone.Done()
	timer := time.NewTimer(housekeeping)
	defer timer.Stop()
	nextHouse := t.n.now() + int64(housekeeping)
	var due []*channel
	var flush []*conn
	for {
		now := t.n.now()
		t.mu.Lock()
		due = t.mu.chans.expire(now, due)
		next := nextHouse
		for c, at := range t.mu.conns {
			if at <= now {
				flush = append(flush, c)
				delete(t.mu.conns, c)
			} else {
				next = min(next, at)
			}
		}
		if at, ok := t.mu.chans.next(); ok {
			next = min(next, at)
		}
		t.mu.sleepTill = next
		t.mu.Unlock()

		for i, ch := range due {
			ch.tick(now)
			due[i] = nil
		}
		due = due[:0]
		for i, c := range flush {
			if at, ok := c.streamDeadline(now); ok {
				t.mu.Lock()
				t.flushAtLocked(c, at)
				t.mu.sleepTill = min(t.mu.sleepTill, at)
				t.mu.Unlock()
				next = min(next, at)
			} else {
				c.schedule()
			}
			flush[i] = nil
		}
		flush = flush[:0]
		if now >= nextHouse {
			t.housekeep(now)
			nextHouse = now + int64(housekeeping)
			next = min(next, nextHouse)
		}

		timer.Reset(time.Duration(max(next-t.n.now(), 0)))
		select {
		case <-timer.C:
		case <-t.kick:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		case <-t.stop:
			return
		}
	}
}

// testHookHandshakeExpired, set only by tests, runs in housekeep for each
// connection found past its handshake timeout, before it is closed.
var testHookHandshakeExpired atomic.Pointer[func(*conn)]

// housekeep closes connections that never finished their handshake or went
// idle, pings open ones, and injects connection resets.
func (t *timers) housekeep(now int64) {
	n := t.n
	var expired []*conn
	t.mu.Lock()
	for c := range t.mu.handshake {
		switch {
		case c.state.Load() != stHandshake:
			delete(t.mu.handshake, c)
		case now-c.openedAt > int64(n.o.handshakeTimeout):
			delete(t.mu.handshake, c)
			expired = append(expired, c)
		}
	}
	t.mu.Unlock()
	for _, c := range expired {
		if hook := testHookHandshakeExpired.Load(); hook != nil {
			(*hook)(c)
		}
		// Only a connection still shaking hands times out: since the
		// look above, its loop may have opened it (and attached it to
		// its peer) or closed it for a fault, counted already.
		if !c.state.CompareAndSwap(stHandshake, stClosed) {
			continue
		}
		n.sec.handshakeTimeouts.Add(1)
		c.closeMarked(ErrHandshakeTimeout)
		n.abort(c, ErrHandshakeTimeout) // closes its link
	}

	n.mu.Lock()
	conns := make([]*conn, 0, len(n.mu.conns))
	for c := range n.mu.conns {
		if c.state.Load() == stOpen {
			conns = append(conns, c)
		}
	}
	n.mu.Unlock()
	for _, c := range conns {
		idle := time.Duration(now - c.lastRecv.Load())
		if n.o.idleTimeout > 0 && idle > n.o.idleTimeout {
			n.abort(c, ErrIdleTimeout)
			continue
		}
		// Each side pings every ping interval, for its clock samples and
		// to keep the connection alive, and a dialed one while closed
		// channels' numbers wait for a PONG (the PING after their CLOSE
		// may have been lost).
		if (n.o.pingInterval > 0 && now-c.lastPing.Load() >= int64(n.o.pingInterval)) || (c.peer != nil && c.hasRetired()) {
			c.ping(now)
		}
	}
	peers := n.peers()
	for _, p := range peers {
		p.reclaimForWaiters()
	}
	n.checkHealth(now, peers)
	if t.nextReset == 0 && n.o.faults.Reset > 0 {
		if from, ok := n.faultSched.clockStarted(); ok {
			t.nextReset = from + int64(n.o.faults.Reset) // the first reset
		}
	}
	if t.nextReset > 0 && now >= t.nextReset {
		t.nextReset = now + int64(n.o.faults.Reset)
		var dialed []*conn
		for _, c := range conns {
			if c.peer != nil {
				dialed = append(dialed, c)
			}
		}
		if len(dialed) > 0 {
			c := dialed[int(uint64(now)%uint64(len(dialed)))]
			if hook := testHookResetChosen.Load(); hook != nil {
				(*hook)(c)
			}
			_ = c.lk.Execute(func() {
				// Counted only if the reset is what closes it: it may
				// have closed since it was chosen (its peer, a timeout, a
				// shutdown), and then nothing was injected.
				if c.close(errInjectedReset) {
					n.faultN.resets.Add(1)
				}
				_ = c.lk.Close()
			})
		}
	}
}

// testHookResetChosen, set only by tests, runs once housekeep has chosen the
// connection an injected reset breaks, before the reset reaches its loop.
var testHookResetChosen atomic.Pointer[func(*conn)]
