package transport

import (
	"io"
	"sync"
	"testing"
	"time"
)

// A connection accepted while its node shuts down, whose link is set up
// only after shutdown closed it (Node.abort found no link to close), ends
// with the node: no loop of the net backend runs on for a peer that never
// sends, no duplicate of its descriptor is left open on gnet, and Abort
// does not wait for that peer.
func TestAConnectionClosedBeforeItsLinkIsSetEndsWithItsNode(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be []Option) {
		rx, err := NewNode(append([]Option{WithListen("127.0.0.1:0")}, be...)...)
		if err != nil {
			t.Fatal(err)
		}
		var once sync.Once
		closed := make(chan *conn, 1)
		aborted := make(chan struct{})
		hook := func(c *conn) {
			if c.node != rx {
				return
			}
			once.Do(func() {
				go func() { rx.Abort(); close(aborted) }()
				select { // shutdown closes it before it has a link
				case <-c.done:
				case <-time.After(10 * time.Second):
				}
				closed <- c
			})
		}
		testHookSetLink.Store(&hook)
		t.Cleanup(func() { testHookSetLink.Store(nil) })
		nc := rawConn(t, rx.Addr()) // a peer that never sends
		select {
		case <-aborted:
		case <-time.After(10 * time.Second): // hang guard
			_ = nc.Close()
			<-aborted
			t.Fatal("Abort waited for a connection it had closed before its link was set")
		}
		c := <-closed
		// Its socket is closed: the peer reads to the end.
		_ = nc.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.Copy(io.Discard, nc); err != nil {
			t.Errorf("the peer of a connection its node closed, reading: %v, want the end", err)
		}
		if _, ok := c.lk.(gnetLink); ok {
			c.mu.Lock()
			fd := c.fd
			c.mu.Unlock()
			if fd >= 0 {
				t.Errorf("descriptor %d, the connection's duplicate for direct writes, is open after Abort", fd)
			}
		}
	})
}
