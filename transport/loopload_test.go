package transport

import (
	"testing"
	"time"
)

// runLoop feeds l callbacks of busy ns, each after a wait of idle ns, for
// about d up to end (loadNow's clock); it returns when the last ended.
func runLoop(l *loopLoad, busy, idle, d, end int64) int64 {
	t := end - d
	for t < end {
		t += idle
		l.done(t, t+busy)
		t += busy
	}
	return t
}

// sharedLoad is the load of a loop that runs connections of two nodes.
func sharedLoad() *loopLoad {
	l := new(loopLoad)
	l.enroll(new(Node), +1)
	l.enroll(new(Node), +1)
	return l
}

// A loop's load is the share of its time in callbacks, over time rather
// than callbacks, and it is busy past half; one that has run nothing for
// loadWindow is idle whatever it last published.
func TestLoopLoadIsTheShareOfTimeInCallbacks(t *testing.T) {
	var nilLoad *loopLoad
	if nilLoad.busyShared(loadNow()) {
		t.Fatal("a connection on no loop reads as on a busy loop")
	}
	cases := []struct {
		name       string
		busy, idle int64 // ns
		want       bool
		share      float64
	}{
		{"in callbacks 80% of the time", 8000, 2000, true, 0.8},
		{"in callbacks 20% of the time", 2000, 8000, false, 0.2},
		{"many short callbacks, 70%", 700, 300, true, 0.7},
		{"few long callbacks, 30%", 300_000, 700_000, false, 0.3},
	}
	for _, tc := range cases {
		l := sharedLoad()
		end := runLoop(l, tc.busy, tc.idle, 20*loadWindow, 0)
		if got := l.busyShared(end); got != tc.want {
			t.Errorf("%s: busy %v (share %.3f), want %v", tc.name, got, l.share, tc.want)
		}
		if d := l.share - tc.share; d < -0.1 || d > 0.1 {
			t.Errorf("%s: share %.3f, want about %.2f", tc.name, l.share, tc.share)
		}
	}

	// A busy loop that then waits longer than loadWindow without a
	// callback reads idle.
	l := sharedLoad()
	end := runLoop(l, 9000, 1000, 20*loadWindow, 0)
	if !l.busyShared(end) || l.busyShared(end+2*loadWindow) {
		t.Error("a loop in callbacks 90% of the time reads idle, or busy after no callback for two load windows")
	}
	// A loop that was idle and turns busy reads busy within a few windows.
	l = sharedLoad()
	end = runLoop(l, 1000, 99_000, 20*loadWindow, 0)
	if l.busyShared(end) {
		t.Fatal("a loop in callbacks 1% of the time reads busy")
	}
	end = runLoop(l, 9000, 1000, 3*loadWindow, end+3*loadWindow)
	if !l.busyShared(end) {
		t.Errorf("a loop in callbacks 90%% of the time for three load windows reads idle (share %.3f)", l.share)
	}
}

// A loop counts as shared while it runs open connections of more than one
// node, and only a shared loop counts as busy.
func TestALoopIsSharedWhileItRunsTwoNodesConnections(t *testing.T) {
	a, b := new(Node), new(Node)
	l := new(loopLoad)
	end := runLoop(l, 9000, 1000, 20*loadWindow, 0)
	steps := []struct {
		n     *Node
		delta int
		want  bool
	}{
		{a, +1, false}, {a, +1, false}, {b, +1, true}, {a, -1, true},
		{a, -1, false}, {b, -1, false}, {b, +1, false}, {a, +1, true},
	}
	for i, s := range steps {
		l.enroll(s.n, s.delta)
		if got := l.busyShared(end); got != s.want {
			t.Fatalf("step %d: a loop 90%% busy with %v reads busy and shared %v, want %v", i, l.nodes, got, s.want)
		}
	}
}

// The node-wide gap after a direct write (see
// TestADirectWriteHoldsOffTheNodesOtherConnections) does not hold a
// sender off a connection whose loop is busy and shared with other nodes:
// what the loop is asked to write would wait behind their work (in one
// process, the loop that also reads for the process's receiving nodes).
// With the loop idle, or busy with the node's own connections alone, the
// gap holds.
func TestABusySharedLoopWaivesTheNodeWideGap(t *testing.T) {
	n := testNode(t)
	c := openDirectConn(t, n)
	// Not written for ten seconds, at 100 ms a write: idle by its own gap,
	// and within the node's gap for 100 ms after another connection's
	// direct write.
	c.lastWrite.Store(n.now() - int64(10*time.Second))
	c.writeCost.Store(int64(100 * time.Millisecond))
	l := new(loopLoad)
	l.enroll(n, +1)
	c.load.Store(l)

	try := func() bool {
		t.Helper()
		n.lastDirect.Store(n.now()) // another connection of the node was just written directly
		direct, _ := c.enqueue(&channel{}, 100, true)
		c.mu.Lock()
		c.mu.scheduled = false
		c.mu.Unlock()
		return direct
	}
	runLoop(l, 1000, 9000, 20*loadWindow, loadNow()) // 10% busy
	if try() {
		t.Fatal("right after a direct write to another connection, a sender wrote directly though its loop is idle")
	}
	// 90% busy, the last callback ending a second from now: the loop reads
	// busy however slowly this test runs.
	runLoop(l, 9000, 1000, 20*loadWindow, loadNow()+int64(time.Second))
	if try() {
		t.Fatal("right after a direct write to another connection, a sender wrote directly though its loop is busy with its own node's connections alone")
	}
	l.enroll(new(Node), +1)
	if !l.busyShared(loadNow()) {
		t.Fatalf("the loop reads idle at share %.3f", l.share)
	}
	if !try() {
		t.Error("the node-wide gap held a sender off a connection whose loop is busy with another node's")
	}
}

// A connection's stats carry its loop's load (ConnStats.LoopBusy): the
// share a loop of known load published, 1 for a loop stuck in one
// callback for a load window, 0 for one idle that long and for a
// connection on no gnet loop.
func TestAConnectionsStatsCarryItsLoopsLoad(t *testing.T) {
	n := testNode(t)
	c := openDirectConn(t, n)
	if got := c.snapshot().LoopBusy; got != 0 {
		t.Fatalf("a connection on no loop reads a loop %v busy", got)
	}
	l := new(loopLoad)
	c.load.Store(l)
	// 70% busy, the last callback ending a second from now: current
	// however slowly this test runs.
	runLoop(l, 7000, 3000, 20*loadWindow, loadNow()+int64(time.Second))
	if got := c.snapshot().LoopBusy; got < 0.65 || got > 0.75 {
		t.Errorf("a loop 70%% busy reads %v", got)
	}
	// A loop in one callback for two load windows: busy the whole time.
	// (A callback that began two windows ago began after the load clock's
	// epoch, the process's start: run alone, this test can get here sooner.)
	for loadNow() <= 2*loadWindow {
		time.Sleep(time.Duration(loadWindow))
	}
	l = new(loopLoad)
	c.load.Store(l)
	l.in.Store(loadNow() - 2*loadWindow)
	if got := c.snapshot().LoopBusy; got != 1 {
		t.Errorf("a loop in one callback for two load windows reads %v busy, want 1", got)
	}
	l.done(l.in.Load(), loadNow())
	if got := c.snapshot().LoopBusy; got < 0.9 {
		t.Errorf("right after a callback of two load windows the loop reads %v busy", got)
	}
	// and then idle for two windows.
	l.at.Store(loadNow() - 2*loadWindow)
	if got := c.snapshot().LoopBusy; got != 0 {
		t.Errorf("a loop idle for two load windows reads %v busy, want 0", got)
	}
}
