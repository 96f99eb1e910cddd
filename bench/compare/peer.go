package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"time"
)

// A peer is one system that carries messages from a writer to a reader over loopback. Each
// call sets up its own connections (and servers) and tears them down before it returns, so
// setup is never part of a measured interval and peers never share sockets.
//
// A peer is used by one goroutine at a time.
type peer interface {
	// Name is the peer's key in the report ("tcp", "grpc", ...).
	Name() string
	// Throughput runs one stream of messages of size bytes for about d and returns how many
	// the reader received and checked, and the time from the first write to the reader
	// holding the last message. It fails if the reader saw a message out of order, of the
	// wrong length, or a count different from what the writer sent.
	Throughput(ctx context.Context, size int, d time.Duration) (msgs int64, elapsed time.Duration, err error)
	// Latency runs n ping-pong round trips of one message of size bytes and returns the
	// round-trip times. It fails if an echo is not the message that was sent.
	Latency(ctx context.Context, size, n int) (hist, error)
}

// peerConfig holds what every peer constructor takes.
type peerConfig struct {
	// maxMsgs, when positive, stops a throughput writer after that many messages even if
	// the duration has not ended, so tests can check that counts are exact.
	maxMsgs int64
}

// peerEntry is one registered peer constructor.
type peerEntry struct {
	name  string
	rank  int
	build func(peerConfig) peer
}

// registry holds the peers this binary knows; each peer's file adds itself from init. To
// add a peer, write one file that implements peer and, optionally, about() string (one
// sentence on how it carries messages, printed in compare.md), and registers it:
//
//	func init() { registerPeer("sluice", 30, func(cfg peerConfig) peer { return &sluicePeer{cfg: cfg} }) }
//
// Ranks so far: tcp 0, grpc 10, grpc-packed 11, nats 20. The report's ratios pair "sluice"
// with every other peer by name, so no other change is needed.
var registry []peerEntry

// registerPeer adds a peer. rank orders the peers in a run (lower runs first); a peer's
// file calls it from init, so adding a peer is adding a file. Not safe for concurrent use.
func registerPeer(name string, rank int, build func(peerConfig) peer) {
	for _, e := range registry {
		if e.name == name {
			panic("compare: peer registered twice: " + name)
		}
	}
	registry = append(registry, peerEntry{name: name, rank: rank, build: build})
	sort.SliceStable(registry, func(i, j int) bool { return registry[i].rank < registry[j].rank })
}

// peerNames returns the registered peer names in run order.
func peerNames() []string {
	names := make([]string, len(registry))
	for i, e := range registry {
		names[i] = e.name
	}
	return names
}

// errUnknownPeer is returned when --peers names a peer this binary does not have.
var errUnknownPeer = errors.New("compare: unknown peer")

// buildPeers builds the named peers in run order; an empty list means all of them.
func buildPeers(names []string, cfg peerConfig) ([]peer, error) {
	want := map[string]bool{}
	for _, n := range names {
		if n = strings.TrimSpace(n); n != "" {
			want[n] = true
		}
	}
	var out []peer
	known := map[string]bool{}
	for _, e := range registry {
		known[e.name] = true
		if len(want) == 0 || want[e.name] {
			out = append(out, e.build(cfg))
		}
	}
	var missing []string
	for n := range want {
		if !known[n] {
			missing = append(missing, n)
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return nil, fmt.Errorf("%w %s (have %s)", errUnknownPeer, strings.Join(missing, ","), strings.Join(peerNames(), ","))
	}
	return out, nil
}

// stopper tells a throughput writer when to stop: when d has passed, when ctx ends, or
// after maxMsgs messages. done is safe to call from the writer while the timer fires.
type stopper struct {
	flag    atomic.Bool
	maxMsgs int64
	timer   *time.Timer
	unhook  func() bool
}

func newStopper(ctx context.Context, d time.Duration, maxMsgs int64) *stopper {
	s := &stopper{maxMsgs: maxMsgs}
	s.timer = time.AfterFunc(d, func() { s.flag.Store(true) })
	s.unhook = context.AfterFunc(ctx, func() { s.flag.Store(true) })
	return s
}

// done reports whether the writer, having sent sent messages, must stop.
func (s *stopper) done(sent int64) bool {
	return s.flag.Load() || (s.maxMsgs > 0 && sent >= s.maxMsgs)
}

// full reports whether sent reached the message limit; packers call it per message.
func (s *stopper) full(sent int64) bool {
	return s.maxMsgs > 0 && sent >= s.maxMsgs
}

func (s *stopper) release() {
	s.timer.Stop()
	s.unhook()
}

// Every message carries its sequence number in its first 8 bytes (little endian) when it
// is at least 8 bytes long, so every reader checks order and loss, not only counts.

// stamp writes seq into the head of p.
func stamp(p []byte, seq uint64) {
	if len(p) >= 8 {
		binary.LittleEndian.PutUint64(p, seq)
	}
}

var (
	errWrongLength = errors.New("compare: message has the wrong length")
	errCountDiffer = errors.New("compare: reader count differs from writer count")
	errBadEcho     = errors.New("compare: echo differs from the ping")
	errTruncated   = errors.New("compare: stream ended inside a message")
)

// seqError says a reader saw message got where it expected want.
type seqError struct{ want, got uint64 }

func (e *seqError) Error() string {
	return fmt.Sprintf("compare: message out of sequence: want %d, got %d", e.want, e.got)
}

// checker verifies the messages one reader receives: length, and sequence when the size
// allows. It is owned by one reader goroutine.
type checker struct {
	size int
	next uint64
}

// check verifies p, the next message; p is only read during the call.
func (c *checker) check(p []byte) error {
	if len(p) != c.size {
		return fmt.Errorf("%w: %d bytes, want %d", errWrongLength, len(p), c.size)
	}
	if len(p) >= 8 {
		if got := binary.LittleEndian.Uint64(p); got != c.next {
			return &seqError{want: c.next, got: got}
		}
	}
	c.next++
	return nil
}

// Packed framing, used by tcp and grpc-packed: a 4-byte big-endian length, then the payload.

// frameSize is the ideal batch: the writer fills buffers of this many bytes.
const frameSize = 64 << 10

// appendMsg appends one length-prefixed message of size bytes stamped with seq, copying
// from payload (which must be size bytes).
func appendMsg(dst, payload []byte, seq uint64) []byte {
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(payload)))
	at := len(dst)
	dst = append(dst, payload...)
	stamp(dst[at:], seq)
	return dst
}

// fits reports whether one more message of size bytes fits in a frame holding used bytes;
// an empty frame always takes one message so sizes above frameSize still move.
func fits(used, size int) bool {
	return used == 0 || used+4+size <= frameSize
}

// parseMsgs checks every whole message in b and returns how many there were and how many
// bytes they used; an incomplete message at the end is left for the next read.
func parseMsgs(b []byte, c *checker) (msgs int64, used int, err error) {
	for len(b)-used >= 4 {
		n := int(binary.BigEndian.Uint32(b[used:]))
		if n != c.size {
			return msgs, used, fmt.Errorf("%w: header says %d bytes, want %d", errWrongLength, n, c.size)
		}
		if len(b)-used-4 < n {
			break
		}
		if err := c.check(b[used+4 : used+4+n]); err != nil {
			return msgs, used, err
		}
		used += 4 + n
		msgs++
	}
	return msgs, used, nil
}

// sameCount turns a writer/reader count mismatch into an error.
func sameCount(name string, sent, got int64) error {
	if sent != got {
		return fmt.Errorf("%s: %w: sent %d, received %d", name, errCountDiffer, sent, got)
	}
	return nil
}
