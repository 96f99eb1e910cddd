package transport

import (
	"bytes"
	"runtime"
	"strconv"
	"sync"
)

// Who calls: a handler may close its node (Node.Close, Node.Abort) or a
// peer (Peer.Close), and those wait for what the handler's own goroutine
// must do first, to return: a handler of Handle runs on its inbox's
// goroutine, which shutdown waits for; an inline handler runs on an event
// loop, which must run the close callbacks of the connections that
// shutdown and Peer.Close wait for. Go gives a goroutine no identity to
// pass around, and a Handler's signature none to receive, so the node
// tells its callers apart by goroutine id, read where a goroutine starts
// to run handlers and where a close begins, never per message.

// goid returns the calling goroutine's id, from the header of its stack
// trace ("goroutine 18 [running]:"), or 0 if that cannot be read. Ids are
// never reused.
func goid() uint64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b, ok := bytes.CutPrefix(b, []byte("goroutine "))
	if !ok {
		return 0
	}
	if i := bytes.IndexByte(b, ' '); i >= 0 {
		b = b[:i]
	}
	id, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return 0
	}
	return id
}

// loopGoroutines holds the ids of the goroutines that run connections'
// callbacks, where inline handlers run: the gnet event loops that have
// opened a connection, and the loop goroutines of the net backend's
// links. A gnet loop runs the connections of every node in its group, so
// a call on one must not wait for any connection to close.
var loopGoroutines sync.Map // of uint64 to struct{}

// onLoop reports whether the goroutine g runs connections' callbacks.
func onLoop(g uint64) bool {
	if g == 0 {
		return false
	}
	_, ok := loopGoroutines.Load(g)
	return ok
}
