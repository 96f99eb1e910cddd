package transport

import (
	"context"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// A loop's load is the share of its time in callbacks, over time rather
// than callbacks, and it is busy past half; one that has run nothing for
// loadWindow is idle whatever it last published.
func TestLoopLoadIsTheShareOfTimeInCallbacks(t *testing.T) {
	var nilLoad *loopLoad
	if nilLoad.busy(loadNow()) {
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
		l := new(loopLoad)
		end := runLoop(l, tc.busy, tc.idle, 20*loadWindow, 0)
		if got := l.busy(end); got != tc.want {
			t.Errorf("%s: busy %v (share %.3f), want %v", tc.name, got, l.share, tc.want)
		}
		if d := l.share - tc.share; d < -0.1 || d > 0.1 {
			t.Errorf("%s: share %.3f, want about %.2f", tc.name, l.share, tc.share)
		}
	}

	// A busy loop that then waits longer than loadWindow without a
	// callback reads idle.
	l := new(loopLoad)
	end := runLoop(l, 9000, 1000, 20*loadWindow, 0)
	if !l.busy(end) || l.busy(end+2*loadWindow) {
		t.Error("a loop in callbacks 90% of the time reads idle, or busy after no callback for two load windows")
	}
	// A loop that was idle and turns busy reads busy within a few windows.
	l = new(loopLoad)
	end = runLoop(l, 1000, 99_000, 20*loadWindow, 0)
	if l.busy(end) {
		t.Fatal("a loop in callbacks 1% of the time reads busy")
	}
	end = runLoop(l, 9000, 1000, 3*loadWindow, end+3*loadWindow)
	if !l.busy(end) {
		t.Errorf("a loop in callbacks 90%% of the time for three load windows reads idle (share %.3f)", l.share)
	}
}

// The node-wide gap after a direct write (see
// TestADirectWriteHoldsOffTheNodesOtherConnections) does not hold a
// sender off a connection whose loop is busy: what the loop is asked to
// write would wait behind its other work (in one process, the loop that
// also reads for the process's receiving nodes). With the loop idle the
// gap holds.
func TestABusyLoopWaivesTheNodeWideGap(t *testing.T) {
	n := testNode(t)
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
	c := newConn(n, nil, 0)
	c.lk = &recLink{}
	c.setDirectFD(fds[0])
	c.state.Store(stOpen)
	t.Cleanup(func() { c.close(context.Canceled) })
	// Not written for ten seconds, at 100 ms a write: idle by its own gap,
	// and within the node's gap for 100 ms after another connection's
	// direct write.
	c.lastWrite.Store(n.now() - int64(10*time.Second))
	c.writeCost.Store(int64(100 * time.Millisecond))
	l := new(loopLoad)
	c.setLoad(l)

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
	if !l.busy(loadNow()) {
		t.Fatalf("the loop reads idle at share %.3f", l.share)
	}
	if !try() {
		t.Error("the node-wide gap held a sender off a connection whose loop is busy")
	}
}
