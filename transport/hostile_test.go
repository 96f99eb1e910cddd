package transport

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/wire"
)

// backend is one way of running connections, for tests that run on each.
type backend struct {
	name string
	opts []Option
}

var (
	tlsOnce sync.Once
	tlsCfg  *tls.Config
)

// testTLS returns a TLS configuration for both sides: a self-signed
// certificate for 127.0.0.1 that the client side trusts.
func testTLS(t testing.TB) *tls.Config {
	tlsOnce.Do(func() {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(1),
			Subject:      pkix.Name{CommonName: "sluice test"},
			NotBefore:    time.Now().Add(-time.Hour),
			NotAfter:     time.Now().Add(24 * time.Hour),
			IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
		if err != nil {
			t.Fatal(err)
		}
		cert, err := x509.ParseCertificate(der)
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AddCert(cert)
		tlsCfg = &tls.Config{
			Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}},
			RootCAs:      pool,
		}
	})
	return tlsCfg
}

func backends(t testing.TB) []backend {
	return []backend{
		{"gnet", nil},
		{"net", []Option{WithBackend(BackendNet)}},
		{"tls", []Option{WithTLS(testTLS(t))}},
	}
}

// forEachBackend runs test once per backend, as subtests.
func forEachBackend(t *testing.T, test func(t *testing.T, be []Option)) {
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) { test(t, b.opts) })
	}
}

// forPlainBackends runs test on the backends without TLS, for tests that
// play a hostile peer with a plain socket.
func forPlainBackends(t *testing.T, test func(t *testing.T, be []Option)) {
	for _, b := range backends(t)[:2] {
		t.Run(b.name, func(t *testing.T) { test(t, b.opts) })
	}
}

// newPairOn is newPair with the backend's options on both nodes.
func newPairOn(t *testing.T, be, rxOpts, txOpts []Option) (rx, tx *Node, p *Peer) {
	t.Helper()
	return newPair(t, append(append([]Option(nil), be...), rxOpts...), append(append([]Option(nil), be...), txOpts...))
}

var (
	testKey  = []byte("a pre-shared key of 32 bytes....")
	wrongKey = []byte("another key, also of 32 bytes...")
)

// legitFlow sends n messages on 2 channels from a new node with txOpts to
// rx, and returns a function that waits until every one is delivered once,
// in order.
func legitFlow(t *testing.T, rx *Node, n int, txOpts ...Option) (wait func()) {
	t.Helper()
	tx := testNode(t, txOpts...)
	p, err := tx.Peer(rx.Addr())
	if err != nil {
		t.Fatal(err)
	}
	col := newCollector()
	rx.HandleAll(col.handler)
	ctx := ctxT(t, 30*time.Second)
	done := make(chan struct{})
	go func() { defer close(done); sendAll(t, ctx, p, 2, n, 100) }()
	return func() {
		t.Helper()
		<-done
		col.check(t, int64(2*n))
	}
}

func TestAuthentication(t *testing.T) {
	forEachBackend(t, func(t *testing.T, be []Option) {
		with := func(opts ...Option) []Option { return append(append([]Option(nil), be...), opts...) }
		cases := []struct {
			name  string
			rxKey []byte
			txKey []byte
		}{
			{"a dialer with another key is refused, both sides say authentication failed", testKey, wrongKey},
			{"a dialer without a key is refused by a node that has one", testKey, nil},
			{"a dialer with a key refuses a node that has none", nil, testKey},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				var rxOpts, legitOpts []Option
				if tc.rxKey != nil {
					rxOpts = append(rxOpts, WithKey(tc.rxKey))
					legitOpts = append(legitOpts, WithKey(tc.rxKey))
				}
				rx, err := NewNode(with(append(rxOpts, WithListen("127.0.0.1:0"))...)...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(rx.Abort)
				wait := legitFlow(t, rx, 5000, with(legitOpts...)...)

				var txOpts []Option
				if tc.txKey != nil {
					txOpts = append(txOpts, WithKey(tc.txKey))
				}
				tx, err := NewNode(with(txOpts...)...)
				if err != nil {
					t.Fatal(err)
				}
				defer tx.Abort()
				p, _ := tx.Peer(rx.Addr())
				err = p.WaitConnected(ctxT(t, 5*time.Second))
				if !errors.Is(err, ErrAuthFailed) || !errors.Is(err, ErrRejected) {
					t.Fatalf("WaitConnected: %v, want ErrAuthFailed and ErrRejected", err)
				}
				if !strings.Contains(err.Error(), "authentication failed") {
					t.Errorf("the error %q does not say authentication failed", err)
				}
				for _, k := range [][]byte{testKey, wrongKey} {
					if bytes.Contains([]byte(err.Error()), k) {
						t.Errorf("the error %q shows a key", err)
					}
				}
				if _, err := p.OpenSender(ctxT(t, time.Second), taskid.ID{}, taskid.ID{Processor: 1}); !errors.Is(err, ErrRejected) {
					t.Errorf("OpenSender on a refused peer: %v, want ErrRejected", err)
				}
				wait()
				if n := tx.Stats().Refused.AuthFailed; n != 1 {
					t.Errorf("the dialer counted %d authentication failures, want 1 (it must not redial)", n)
				}
				deadline := time.Now().Add(5 * time.Second)
				for rx.Stats().Refused.AuthFailed == 0 && time.Now().Before(deadline) {
					time.Sleep(5 * time.Millisecond)
				}
				if rx.Stats().Refused.AuthFailed == 0 {
					t.Error("the acceptor did not count the authentication failure")
				}
			})
		}
	})
}

func TestTheCallerMayWipeItsKeyOnceTheOptionIsMade(t *testing.T) {
	key := bytes.Clone(testKey)
	opt := WithKey(key)
	clear(key)
	rx, err := NewNode(WithListen("127.0.0.1:0"), WithKey(testKey))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rx.Abort)
	legitFlow(t, rx, 100, opt)()
}

func TestAKeyIsRefusedWhenTooShort(t *testing.T) {
	if _, err := NewNode(WithKey([]byte("qwxzy"))); !errors.Is(err, ErrBadKey) || strings.Contains(err.Error(), "qwxzy") {
		t.Fatalf("NewNode with a 5-byte key: %v, want ErrBadKey without the key in it", err)
	}
}

// recordingProxy forwards one connection to addr and records what the
// dialer sent.
func recordingProxy(t *testing.T, addr string) (proxyAddr string, recorded func() []byte) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var mu sync.Mutex
	var rec bytes.Buffer
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		up, err := net.Dial("tcp", addr)
		if err != nil {
			return
		}
		defer up.Close()
		go func() { _, _ = io.Copy(c, up) }()
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			mu.Lock()
			rec.Write(buf[:n])
			mu.Unlock()
			if _, werr := up.Write(buf[:n]); err != nil || werr != nil {
				return
			}
		}
	}()
	return ln.Addr().String(), func() []byte {
		mu.Lock()
		defer mu.Unlock()
		return bytes.Clone(rec.Bytes())
	}
}

func TestAReplayedHandshakeFails(t *testing.T) {
	forPlainBackends(t, func(t *testing.T, be []Option) {
		rx := listeningNode(t, be, WithKey(testKey))
		// Record an honest dialer's whole handshake through a proxy.
		proxy, recorded := recordingProxy(t, rx.Addr())
		tx, err := NewNode(append([]Option{WithKey(testKey)}, be...)...)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Abort()
		p, _ := tx.Peer(proxy)
		if err := p.WaitConnected(ctxT(t, 5*time.Second)); err != nil {
			t.Fatal(err)
		}
		// The dialer's proof may still be on its way through the proxy.
		want := wire.PrefaceLen + 2*(wire.HeaderLen+wire.AuthBodyLen)
		rec := recorded()
		for deadline := time.Now().Add(5 * time.Second); len(rec) < want && time.Now().Before(deadline); rec = recorded() {
			time.Sleep(time.Millisecond)
		}
		if len(rec) < want {
			t.Fatalf("recorded %d bytes, want at least the %d of a preface and two AUTH frames", len(rec), want)
		}
		wait := legitFlow(t, rx, 5000, append([]Option{WithKey(testKey)}, be...)...)
		// Replay it on a new connection: the node's nonce is new.
		c := rawConn(t, rx.Addr())
		if _, err := c.Write(rec); err != nil {
			t.Fatal(err)
		}
		g, ok := readGoAway(t, c)
		if !ok || g.Code != wire.GoAwayAuthFailed {
			t.Fatalf("the replay got GOAWAY %v (%v), want AUTH_FAILED", g.Code, ok)
		}
		wait()
	})
}

func TestHostilePeersUnderAuthentication(t *testing.T) {
	forPlainBackends(t, func(t *testing.T, be []Option) {
		// Long enough for a loaded loop to read the peers' handshakes (see
		// testHostilePeersLoseOnlyTheirOwnConnection).
		rx := listeningNode(t, be, WithKey(testKey), WithHandshakeTimeout(2*time.Second))
		wait := legitFlow(t, rx, 5000, append([]Option{WithKey(testKey)}, be...)...)
		authPreface := wire.AppendPreface(nil, wire.Preface{Flags: wire.FlagAuth, NodeID: 7})
		cases := []struct {
			name  string
			input []byte
			code  wire.GoAwayCode
		}{
			{"an OPEN before authenticating is a protocol error", wire.AppendOpen(bytes.Clone(authPreface), wire.Open{Channel: 0, Target: taskid.ID{Processor: 1}}), wire.GoAwayProtocolError},
			{"a DATA frame before authenticating is a protocol error", wire.AppendPing(bytes.Clone(authPreface), 1, 0), wire.GoAwayProtocolError},
			{"a made-up proof fails authentication", wire.AppendAuth(wire.AppendAuth(bytes.Clone(authPreface), wire.Auth{Step: wire.AuthChallenge}), wire.Auth{Step: wire.AuthProof}), wire.GoAwayAuthFailed},
			{"a large frame header before authenticating is refused from the header", append(bytes.Clone(authPreface), byte(wire.FrameAuth), 0, 0, 1, 0, 0, 0, 0, 0, 0), wire.GoAwayLimit},
			{"a preface without a key is refused", goodPreface(), wire.GoAwayAuthFailed},
		}
		for _, tc := range cases {
			t.Run(tc.name, func(t *testing.T) {
				c := rawConn(t, rx.Addr())
				if _, err := c.Write(tc.input); err != nil {
					t.Fatal(err)
				}
				g, ok := readGoAway(t, c)
				if !ok || g.Code != tc.code {
					t.Fatalf("GOAWAY %v (%q, %v), want %v", g.Code, g.Message, ok, tc.code)
				}
				if bytes.Contains([]byte(g.Message), testKey) {
					t.Errorf("the GOAWAY message shows the key: %q", g.Message)
				}
			})
		}
		t.Run("a peer sending its handshake a byte at a time is closed at the handshake timeout", func(t *testing.T) {
			// A node of its own, whose handshake timeout ends while the
			// preface and challenge still trickle in, 20 ms a byte.
			rx := listeningNode(t, be, WithKey(testKey), WithHandshakeTimeout(300*time.Millisecond))
			before := rx.Stats().Refused.HandshakeTimeouts
			c := rawConn(t, rx.Addr())
			in := wire.AppendAuth(bytes.Clone(authPreface), wire.Auth{Step: wire.AuthChallenge})
			start := time.Now()
			var werr error
			for i := 0; werr == nil && time.Since(start) < 20*time.Second; i++ { // a hang guard
				_, werr = c.Write(in[i%len(in) : i%len(in)+1])
				if i == len(in)-1 {
					in = in[:0:0] // then the proof, forever
					in = append(in, make([]byte, 1<<10)...)
				}
				time.Sleep(20 * time.Millisecond)
				var one [1]byte
				_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
				if _, rerr := c.Read(one[:]); rerr == io.EOF {
					break
				}
			}
			if time.Since(start) >= 20*time.Second {
				t.Fatal("the slow peer was not closed")
			}
			if got := rx.Stats().Refused.HandshakeTimeouts; got <= before {
				t.Errorf("handshake timeouts %d, want more than %d", got, before)
			}
		})
		wait()
	})
}

func TestAFloodOfOpensIsBoundedByTheChannelLimit(t *testing.T) {
	forPlainBackends(t, func(t *testing.T, be []Option) {
		rx := listeningNode(t, be, WithMaxChannels(100))
		wait := legitFlow(t, rx, 5000, be...)
		b := goodPreface()
		for i := range 10000 {
			b = wire.AppendOpen(b, wire.Open{Channel: uint32(i), Source: taskid.ID{Processor: 9, Index: uint32(i)}, Target: taskid.ID{Processor: 9, Index: uint32(i)}})
		}
		sendExpectingLimit(t, rx.Addr(), b)
		wait()
		if rx.Stats().Refused.Limits == 0 {
			t.Error("the limit was not counted")
		}
	})
}

// TestChurnOfNewPairsIsBoundedByTheReceiverLimit: a peer that opens and
// closes channels of ever new (source, target) pairs, never more than one
// open at a time, is refused once the node keeps state for as many pairs
// as WithMaxReceivers allows, and no more state or targets (each with its
// handler's goroutine under HandleAll) are made; a flow whose pairs the
// node had before is untouched.
func TestChurnOfNewPairsIsBoundedByTheReceiverLimit(t *testing.T) {
	forPlainBackends(t, func(t *testing.T, be []Option) {
		const limit = 100
		rx := listeningNode(t, be, WithMaxReceivers(limit))
		wait := legitFlow(t, rx, 20000, be...)
		pairs := func() (pairs, targets int) {
			rx.mu.Lock()
			defer rx.mu.Unlock()
			return len(rx.mu.recv), len(rx.mu.inboxes)
		}
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
			if p, _ := pairs(); p == 2 {
				break
			} else if time.Now().After(deadline) {
				t.Fatalf("the legitimate flow opened %d pairs, want 2", p)
			}
		}
		b := goodPreface()
		for i := range 10 * limit {
			id := taskid.ID{Processor: 9, Index: uint32(i)}
			b = wire.AppendOpen(b, wire.Open{Channel: 0, Source: id, Target: id})
			b = wire.AppendClose(b, wire.Close{Channel: 0})
		}
		sendExpectingLimit(t, rx.Addr(), b)
		wait()
		if rx.Stats().Refused.Limits == 0 {
			t.Error("the limit was not counted")
		}
		if p, targets := pairs(); p != limit || targets > limit {
			t.Errorf("%d pairs and %d targets, want %d pairs and at most as many targets", p, targets, limit)
		}
	})
}

func TestConnectionsPerAddressAreLimited(t *testing.T) {
	forPlainBackends(t, func(t *testing.T, be []Option) {
		rx := listeningNode(t, be, WithMaxConnsPerAddr(4))
		wait := legitFlow(t, rx, 5000, be...) // one connection
		for range 3 {                         // three more: at the limit
			c := rawConn(t, rx.Addr())
			if _, err := c.Write(goodPreface()); err != nil {
				t.Fatal(err)
			}
		}
		deadline := time.Now().Add(5 * time.Second)
		for len(rx.Stats().Conns) < 4 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		c := rawConn(t, rx.Addr())
		g, ok := readGoAway(t, c)
		if !ok || g.Code != wire.GoAwayLimit {
			t.Fatalf("the fifth connection got GOAWAY %v (%q, %v), want LIMIT", g.Code, g.Message, ok)
		}
		wait()
		if rx.Stats().Refused.ConnLimit != 1 {
			t.Errorf("refused %d connections over the limit, want 1", rx.Stats().Refused.ConnLimit)
		}
	})
}

func TestTruncatedAndTricklingFramesCostOnlyTheirOwnConnection(t *testing.T) {
	forPlainBackends(t, func(t *testing.T, be []Option) {
		rx := listeningNode(t, be, WithMaxFrame(128<<10))
		wait := legitFlow(t, rx, 5000, be...)
		// A frame cut short, then the socket closed.
		c := rawConn(t, rx.Addr())
		f := wire.AppendPing(goodPreface(), 1, 0)
		_, _ = c.Write(f[:len(f)-3])
		c.Close()
		// A header claiming the largest frame, then its body a little at a
		// time: legal, and it can make the node buffer at most one frame.
		c = rawConn(t, rx.Addr())
		h := append(goodPreface(), byte(wire.FramePing), 0, 0, 2, 0, 0, 0, 0, 0, 0) // 128 KiB
		_, _ = c.Write(h)
		for range 20 {
			if _, err := c.Write(make([]byte, 1000)); err != nil {
				t.Fatalf("the node closed a connection that is within its limits: %v", err)
			}
			time.Sleep(time.Millisecond)
		}
		// One byte more than the limit is refused from the header.
		c2 := rawConn(t, rx.Addr())
		_, _ = c2.Write(append(goodPreface(), byte(wire.FramePing), 0, 0, 2, 0, 1, 0, 0, 0, 0))
		if g, ok := readGoAway(t, c2); !ok || g.Code != wire.GoAwayLimit {
			t.Errorf("a header of max frame + 1: GOAWAY %v (%v), want LIMIT", g.Code, ok)
		}
		wait()
	})
}

func TestAPlainPeerOfATLSNodeIsClosed(t *testing.T) {
	rx, err := NewNode(WithListen("127.0.0.1:0"), WithTLS(testTLS(t)), WithHandshakeTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rx.Abort)
	wait := legitFlow(t, rx, 5000, WithTLS(testTLS(t)))
	for _, in := range [][]byte{goodPreface(), []byte("GET / HTTP/1.1\r\n\r\n")} {
		c := rawConn(t, rx.Addr())
		_, _ = c.Write(in)
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		all, err := io.ReadAll(c)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the node did not close a plain-text peer")
		}
		if bytes.Contains(all, []byte(wire.Magic)) {
			t.Error("the node spoke Sluice in clear text to a peer that did not do TLS")
		}
	}
	wait()
}

// TestAThousandIdleConnectionsAreClosedAndCostLittle opens connections that
// never send their preface. They are closed at the handshake timeout, and
// while they are open each costs the node less than idleConnBound bytes of
// heap and stack.
func TestAThousandIdleConnectionsAreClosedAndCostLittle(t *testing.T) {
	const idleConnBound = 48 << 10
	forPlainBackends(t, func(t *testing.T, be []Option) {
		n := 1000
		if testing.Short() {
			n = 200
		}
		rx := listeningNode(t, be, WithMaxConnsPerAddr(n+10), WithHandshakeTimeout(time.Second))
		wait := legitFlow(t, rx, 10000, be...)
		mem := func() uint64 {
			runtime.GC()
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			return m.HeapInuse + m.StackInuse
		}
		before := mem()
		conns := make([]net.Conn, 0, n)
		for range n {
			c, err := net.Dial("tcp", rx.Addr())
			if err != nil {
				t.Skipf("could not open %d connections: %v", n, err)
			}
			conns = append(conns, c)
			defer c.Close()
		}
		deadline := time.Now().Add(5 * time.Second)
		for len(rx.Stats().Conns) < n && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		// The dialing side's sockets are in this process too, and cost it
		// more than the node does; the bound holds for both together.
		if grew := int64(mem()) - int64(before); grew > int64(n)*idleConnBound {
			t.Errorf("%d idle connections took %d KiB (%d B each), want under %d B each", n, grew>>10, grew/int64(n), idleConnBound)
		} else {
			t.Logf("%d idle connections: %d B each", n, max(grew, 0)/int64(n))
		}
		for _, c := range conns {
			_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := io.ReadAll(c); err != nil {
				t.Fatalf("an idle connection was not closed: %v", err)
			}
		}
		if got := rx.Stats().Refused.HandshakeTimeouts; got < uint64(n) {
			t.Errorf("%d handshake timeouts, want %d", got, n)
		}
		wait()
	})
}

func TestAPeerThatIgnoresFlowControlIsClosed(t *testing.T) {
	forPlainBackends(t, func(t *testing.T, be []Option) {
		rx := listeningNode(t, be, WithInboundBudget(1<<20))
		// The flooded task never finishes its first run, so nothing the
		// peer sends is consumed or acknowledged.
		target := taskid.ID{Processor: 9, Index: 1}
		block := make(chan struct{})
		t.Cleanup(func() { close(block) })
		var handed atomic.Int64
		if err := rx.Handle(target, func(_ taskid.Channel, _ uint64, msgs []Message) {
			handed.Add(int64(len(msgs)))
			<-block
		}); err != nil {
			t.Fatal(err)
		}
		wait := legitFlow(t, rx, 5000, be...)
		b := wire.AppendOpen(goodPreface(), wire.Open{Channel: 0, Source: taskid.ID{Processor: 9, Index: 0}, Target: target, Epoch: 1})
		payload := bytes.Repeat([]byte{'x'}, 1000)
		seq := uint64(0)
		for range 20 { // 2 MB of data against a 1 MiB budget
			f, start := wire.BeginFrame(b, wire.FrameData, 0)
			f = wire.AppendRunHeader(f, wire.RunHeader{Channel: 0, FirstSeq: seq, Count: 100})
			for range 100 {
				f = wire.AppendMessage(f, 0, 0, payload)
			}
			b = wire.FinishFrame(f, start)
			seq += 100
		}
		sendExpectingLimit(t, rx.Addr(), b)
		wait()
		// The receiver expects next exactly what follows the runs the task
		// has or holds in its inbox: the refused run was never accepted.
		rs, err := rx.recvState(taskid.ID{Processor: 9, Index: 0}, target)
		if err != nil {
			t.Fatal(err)
		}
		rs.inbox.mu.Lock()
		queued := 0
		for _, d := range rs.inbox.mu.q[rs.inbox.mu.head:] {
			queued += len(d.msgs)
		}
		rs.inbox.mu.Unlock()
		rs.mu.Lock()
		next := rs.mu.r.Next()
		rs.mu.Unlock()
		if want := uint64(handed.Load()) + uint64(queued); next != want {
			t.Errorf("the receiver expects seq %d next, but the task has or holds %d messages", next, want)
		}
	})
}

// sendExpectingLimit writes b to addr from a raw peer, which must then be
// closed with GOAWAY LIMIT.
func sendExpectingLimit(t *testing.T, addr string, b []byte) {
	t.Helper()
	c := rawConn(t, addr)
	go func() { _, _ = c.Write(b) }()
	g, ok := readGoAway(t, c)
	if !ok || g.Code != wire.GoAwayLimit {
		t.Fatalf("GOAWAY %v (%q), want LIMIT", g.Code, g.Message)
	}
}

// acceptedConn waits for rx to hold a connection that is not one of skip
// and returns it.
func acceptedConn(t *testing.T, rx *Node, skip map[*conn]bool) *conn {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		rx.mu.Lock()
		for c := range rx.mu.conns {
			if !skip[c] {
				rx.mu.Unlock()
				return c
			}
		}
		rx.mu.Unlock()
	}
	t.Fatal("the node did not accept the connection")
	return nil
}

// conns is the set of rx's connections now.
func conns(rx *Node) map[*conn]bool {
	rx.mu.Lock()
	defer rx.mu.Unlock()
	m := make(map[*conn]bool)
	for c := range rx.mu.conns {
		m[c] = true
	}
	return m
}

// A peer that sends and never reads what it is sent would make the node
// hold the answers (PONGs here, ACKs alike) without bound: the event loop
// writes what the socket takes and buffers the rest. The node closes the
// connection once what waits for the peer passes what an honest one can
// have waiting (backlogLimit; 1.6 MiB with these options). On the net
// backend the loop blocks in the write instead, while the reader drains
// the socket (an honest peer may be blocked in a write to this node just
// as well): there what the peer sent meanwhile passes that limit, and the
// node closes the socket. Either way the node takes from the peer at most
// about twice the limit beyond what it decoded, however much the peer
// writes.
func TestAPeerThatSendsAndNeverReadsIsClosed(t *testing.T) {
	forPlainBackends(t, func(t *testing.T, be []Option) {
		const sockBuf = 64 << 10
		rx := listeningNode(t, be, WithWindow(64, 16<<10), WithPeerBudget(64<<10), WithMaxFrame(128<<10), WithMaxChannels(16), WithSocketBuffers(sockBuf))
		old := conns(rx)
		nc := rawConn(t, rx.Addr())
		_ = nc.(*net.TCPConn).SetReadBuffer(4 << 10)
		_ = nc.(*net.TCPConn).SetWriteBuffer(sockBuf)
		if _, err := nc.Write(goodPreface()); err != nil {
			t.Fatal(err)
		}
		c := acceptedConn(t, rx, old)
		var b []byte
		for i := range 1 << 20 { // 18 MiB of PINGs, 26 MiB of PONGs
			b = wire.AppendPing(b, uint64(i), wire.PingClock)
		}
		written := make(chan int, 1)
		go func() {
			n, _ := nc.Write(b)
			written <- n
		}()
		guard := time.After(time.Minute) // a hang guard: 1.5-1.9 s under -race on a busy machine
		for tick := time.NewTicker(10 * time.Millisecond); ; {
			select {
			case <-c.done:
			case <-tick.C:
				if c.stats.wireIn.Load() >= uint64(len(b)) {
					t.Fatalf("the node read all %d MiB of PINGs from a peer that reads nothing and kept the connection", len(b)>>20)
				}
				continue
			case <-guard:
				t.Fatalf("after a minute the node keeps the connection of a peer that reads nothing (%d bytes of PINGs decoded)", c.stats.wireIn.Load())
			}
			break
		}
		if !errors.Is(c.closeErr, ErrPeerNotReading) {
			t.Errorf("closed with %v, want ErrPeerNotReading", c.closeErr)
		}
		if got := rx.Stats().Refused.Limits; got != 1 {
			t.Errorf("%d connections refused for a limit, want 1", got)
		}
		// What the node decoded is final once its loop has ended.
		c.mu.Lock()
		lk := c.lk
		c.mu.Unlock()
		if l, ok := lk.(*netLink); ok {
			select {
			case <-l.done:
			case <-time.After(10 * time.Second):
				t.Fatal("the connection's loop did not end")
			}
		}
		var n int
		select {
		case n = <-written:
		case <-time.After(10 * time.Second):
			t.Fatal("the peer's write did not end once the node closed the connection")
		}
		// Beyond what it decoded, the node took at most its inbound
		// buffer and what its reader kept pending, a limit each, and the
		// socket buffers hold the rest (Linux reserves up to twice the
		// size asked, each way).
		limit := c.backlogLimit()
		if beyond := n - int(c.stats.wireIn.Load()); beyond > 2*limit+8*sockBuf {
			t.Errorf("the peer wrote %d bytes the node did not decode, more than twice the limit of %d and the socket buffers", beyond, limit)
		}
	})
}

// The inbound budget counts each queued message's record (a Message, 32
// bytes) with its payload, or a flood of empty messages to a task that
// does not keep up would cost nothing against it.
func TestAFloodOfEmptyMessagesIsClosedAtTheInboundBudget(t *testing.T) {
	forPlainBackends(t, func(t *testing.T, be []Option) {
		rx := listeningNode(t, be, WithInboundBudget(1<<20))
		target := taskid.ID{Processor: 9, Index: 1}
		block := make(chan struct{})
		t.Cleanup(func() { close(block) })
		if err := rx.Handle(target, func(taskid.Channel, uint64, []Message) { <-block }); err != nil {
			t.Fatal(err)
		}
		b := wire.AppendOpen(goodPreface(), wire.Open{Channel: 0, Source: taskid.ID{Processor: 9}, Target: target, Epoch: 1})
		seq := uint64(0)
		for range 4 { // 256 Ki messages, 8 MiB of records against a 1 MiB budget, 512 KiB on the wire
			f, start := wire.BeginFrame(b, wire.FrameData, 0)
			f = wire.AppendRunHeader(f, wire.RunHeader{Channel: 0, FirstSeq: seq, Count: 1 << 16})
			for range 1 << 16 {
				f = wire.AppendMessage(f, 0, 0, nil)
			}
			b = wire.FinishFrame(f, start)
			seq += 1 << 16
		}
		sendExpectingLimit(t, rx.Addr(), b)
	})
}

// A DATA frame of maxFrame bytes may hold maxFrame/2 empty messages, each
// decoded into a 32-byte Message in the connection's scratch slice: 16
// times the frame. The scratch grown for such a frame (here of a stale
// channel, whose data is dropped and charged nowhere) is not kept for the
// life of the connection.
func TestADataFrameOfManyEmptyMessagesLeavesNoLargeScratch(t *testing.T) {
	rx := listeningNode(t, nil)
	rx.HandleAll(func(taskid.ID) Handler { return func(taskid.Channel, uint64, []Message) {} })
	src, dst := taskid.ID{Processor: 9}, taskid.ID{Processor: 9, Index: 1}
	// Epoch 2 under number 0, then epoch 1 of the same pair under number
	// 1: stale, its data dropped.
	b := wire.AppendOpen(goodPreface(), wire.Open{Channel: 0, Source: src, Target: dst, Epoch: 2})
	b = wire.AppendOpen(b, wire.Open{Channel: 1, Source: src, Target: dst, Epoch: 1})
	f, start := wire.BeginFrame(b, wire.FrameData, 0)
	f = wire.AppendRunHeader(f, wire.RunHeader{Channel: 1, FirstSeq: 0, Count: 1 << 20}) // a 2 MiB body
	for range 1 << 20 {
		f = wire.AppendMessage(f, 0, 0, nil)
	}
	b = wire.FinishFrame(f, start)
	old := conns(rx)
	nc := rawConn(t, rx.Addr())
	c := acceptedConn(t, rx, old)
	// A PING after it: its PONG says the frame before it was read.
	if _, err := nc.Write(wire.AppendPing(b, 7, 0)); err != nil {
		t.Fatal(err)
	}
	_ = nc.SetReadDeadline(time.Now().Add(30 * time.Second))
	for r, buf := []byte(nil), make([]byte, 4096); ; {
		n, err := nc.Read(buf)
		if err != nil {
			t.Fatalf("no PONG: %v (closed: %v)", err, c.closeErr)
		}
		r = append(r, buf[:n]...)
		if bytes.Contains(r, wire.AppendPong(nil, wire.Pong{Value: 7})) {
			break
		}
	}
	scratch := make(chan int, 1)
	c.mu.Lock() // setLink set lk under it
	lk := c.lk
	c.mu.Unlock()
	if err := lk.Execute(func() { scratch <- cap(c.in.msgs) }); err != nil {
		t.Fatal(err)
	}
	if kept := <-scratch * int(unsafe.Sizeof(Message{})); kept > maxScratchMsgs*int(unsafe.Sizeof(Message{})) {
		t.Errorf("the connection keeps %d MiB of scratch after a %d MiB frame", kept>>20, len(b)>>20)
	}
}

// Every connection closed for a malformed or unexpected frame counts in
// RefusedStats.ProtocolErrors: also an OPEN of a number already open (or
// far beyond the open ones), and an AUTH frame on a connection that did
// not agree to authenticate.
func TestEveryProtocolFaultIsCounted(t *testing.T) {
	rx := listeningNode(t, nil)
	open := func(num uint32, i uint32) wire.Open {
		id := taskid.ID{Processor: 9, Index: i}
		return wire.Open{Channel: num, Source: id, Target: id, Epoch: 1}
	}
	for _, tc := range []struct {
		name  string
		input []byte
	}{
		{"an OPEN of a number already open", wire.AppendOpen(wire.AppendOpen(goodPreface(), open(0, 0)), open(0, 1))},
		{"an OPEN of a number far beyond the open ones", wire.AppendOpen(goodPreface(), open(1<<20, 0))},
		{"an AUTH frame without authentication", wire.AppendAuth(goodPreface(), wire.Auth{Step: wire.AuthChallenge})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := rx.Stats().Refused.ProtocolErrors
			old := conns(rx)
			nc := rawConn(t, rx.Addr())
			c := acceptedConn(t, rx, old)
			if _, err := nc.Write(tc.input); err != nil {
				t.Fatal(err)
			}
			g, ok := readGoAway(t, nc)
			if !ok || g.Code != wire.GoAwayProtocolError {
				t.Fatalf("GOAWAY %v (%q, %v), want PROTOCOL_ERROR", g.Code, g.Message, ok)
			}
			<-c.done // closed, and counted
			if got := rx.Stats().Refused.ProtocolErrors; got != before+1 {
				t.Errorf("protocol errors %d, want %d (GOAWAY %q)", got, before+1, g.Message)
			}
		})
	}
}
