package transport

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/batch"
	"github.com/sluicehq/sluice/lossdetect"
	"github.com/sluicehq/sluice/transport/internal/handshake"
	"github.com/sluicehq/sluice/window"
	"github.com/sluicehq/sluice/wire"
)

// An Option configures a [Node]. Each option's doc states its default.
type Option func(*options)

type options struct {
	listen           string
	nodeID           uint64
	epoch            uint64
	connsPerPeer     int
	window           window.Config
	loss             lossdetect.Config
	batch            batch.Config
	compress         bool
	maxFrame         int
	maxChannels      int
	maxReceivers     int
	peerBudget       int
	inboundBudget    int
	handshakeTimeout time.Duration
	idleTimeout      time.Duration
	pingInterval     time.Duration
	dialTimeout      time.Duration
	minBackoff       time.Duration
	maxBackoff       time.Duration
	eventLoops       int
	faults           Faults
	deferFaults      bool // the fault clock waits for Node.StartFaultClock
	logger           *slog.Logger
	key              []byte
	tls              *tls.Config
	backend          Backend
	maxConnsPerAddr  int
	socketBuffer     int
	clockOffset      time.Duration
	stallAlert       time.Duration
	slowAlert        time.Duration
}

func defaultOptions() options {
	return options{
		connsPerPeer:     1,
		window:           window.DefaultConfig(),
		loss:             lossdetect.DefaultConfig(),
		batch:            batch.DefaultConfig(),
		maxFrame:         wire.DefaultMaxFrame,
		maxChannels:      65536,
		maxReceivers:     DefaultMaxReceivers,
		peerBudget:       DefaultPeerBudget,
		inboundBudget:    64 << 20,
		handshakeTimeout: 5 * time.Second,
		idleTimeout:      0,
		pingInterval:     time.Second,
		dialTimeout:      3 * time.Second,
		minBackoff:       10 * time.Millisecond,
		maxBackoff:       2 * time.Second,
		logger:           slog.New(slog.DiscardHandler),
		maxConnsPerAddr:  64,
		socketBuffer:     DefaultSocketBuffer,
		stallAlert:       DefaultStallAlert,
		slowAlert:        DefaultSlowConsumerAlert,
	}
}

// WithOptions applies opts in order, so that a list of options can be
// passed where one is expected.
func WithOptions(opts ...Option) Option {
	return func(o *options) {
		for _, opt := range opts {
			opt(o)
		}
	}
}

// WithListen makes the node accept peers on addr ("127.0.0.1:7400", or
// ":0" for any free port; see [Node.Addr]). Default: the node only dials.
func WithListen(addr string) Option { return func(o *options) { o.listen = addr } }

// WithNodeID sets the id this node announces in its connection preface.
// Default: a random 64-bit id.
func WithNodeID(id uint64) Option { return func(o *options) { o.nodeID = id } }

// WithEpoch sets the epoch of the channels this node opens when
// [Peer.OpenSender] is not given one. Default: the time the node started, in
// nanoseconds since 1970, so that a restarted process fences its previous
// incarnation's messages without storing anything.
func WithEpoch(e uint64) Option { return func(o *options) { o.epoch = e } }

// WithConnectionsPerPeer spreads a peer's channels over n connections.
// Default 1.
func WithConnectionsPerPeer(n int) Option { return func(o *options) { o.connsPerPeer = n } }

// WithWindow sets each channel's flow-control window: at most msgs
// messages and bytes bytes sent and not yet acknowledged, counting each
// message's payload and its head on the wire (a timestamp delta and a
// length, 2 to 15 bytes; the window keeps messages encoded, ready to be
// written). A payload larger than bytes less 15 ([MaxMessageHead]), or
// than a frame holds ([WithMaxFrame]), is refused with [ErrTooLarge]; bytes
// must exceed 15. Default
// [DefaultWindowMessages] and [DefaultWindowBytes], measured on loopback: a
// window must cover what one channel sends in an AckRequest round trip, and
// larger ones were slower because what they retain no longer fits in the
// cache.
func WithWindow(msgs, bytes int) Option {
	return func(o *options) { o.window.MaxMessages, o.window.MaxBytes = msgs, bytes }
}

// MaxMessageHead is the most bytes a message takes in a window, and on the
// wire, beyond its payload: its timestamp delta and its length.
const MaxMessageHead = wire.MaxMessageHeadLen

// Defaults of [WithWindow].
const (
	DefaultWindowMessages = 4096
	DefaultWindowBytes    = 1 << 20
)

// WithAckTimeouts sets how long an unanswered ACKREQUEST or OPEN waits
// before it is repeated: initial until a round trip has been measured, then
// the measured timeout (RFC 6298) kept within [min, max], doubling on each
// repeat up to max. Default 20 ms, 2 ms and 1 s.
func WithAckTimeouts(initial, min, max time.Duration) Option {
	return func(o *options) {
		o.loss.InitialAckTimeout, o.loss.MinAckTimeout, o.loss.MaxAckTimeout = initial, min, max
	}
}

// WithMaxBatch sets the size at which a batch is cut and written without
// waiting for more. Default 64 KiB.
func WithMaxBatch(bytes int) Option { return func(o *options) { o.batch.MaxBatchBytes = bytes } }

// WithLinger sets how long a batch may wait for more messages while writes
// are in flight: initial until write times and the message rate have been
// measured, then adapted within [min, max] (min == max == initial: fixed).
// A batch never waits on an idle connection. Default 50 µs within [5 µs,
// 1 ms].
func WithLinger(initial, min, max time.Duration) Option {
	return func(o *options) { o.batch.Linger, o.batch.MinLinger, o.batch.MaxLinger = initial, min, max }
}

// WithCompression offers s2 compression of large batches to peers; a batch
// is compressed only when both sides offered it, when it is at least 8 KiB,
// and when it compresses well (incompressible data is detected and skipped
// cheaply).
// Default off.
func WithCompression(on bool) Option { return func(o *options) { o.compress = on } }

// WithMaxFrame limits the body of a frame this node accepts. A message
// goes in one frame, so it also bounds the payloads this node sends
// ([Node.MaxPayload]), taking its peers' limit to be the same: nodes that
// exchange messages larger than about 4 MiB raise it alike. Default
// wire.DefaultMaxFrame (4 MiB).
func WithMaxFrame(n int) Option { return func(o *options) { o.maxFrame = n } }

// WithMaxChannels limits the channels a peer may open on one connection.
// n must be at least 1: the limit is what bounds the memory a peer can make
// a connection hold in channel state, so there is no "no limit". Default
// 65536.
func WithMaxChannels(n int) Option { return func(o *options) { o.maxChannels = n } }

// DefaultMaxReceivers is the default of [WithMaxReceivers].
const DefaultMaxReceivers = 1 << 16

// WithMaxReceivers limits the (source, target) pairs this node keeps
// receiving state for, from all peers together. The state of a pair
// outlives its channels (it is what fences off an older epoch and lets a
// reconnected channel resume), so without a bound a peer that opens and
// closes channels of ever new tasks would grow it without end, and, under
// [Node.HandleAll], start a goroutine for each new target. A channel that
// would add a pair beyond the limit is refused like one beyond
// [WithMaxChannels]: the connection ends with a GOAWAY that says so, and
// pairs the node already has go on. A pair costs about 600 bytes when its
// target is new (on amd64), a target under HandleAll a goroutine more.
// Default DefaultMaxReceivers (65,536: an engine node receiving from 256
// tasks into each of 256).
func WithMaxReceivers(n int) Option { return func(o *options) { o.maxReceivers = n } }

// WithPeerBudget limits the memory the windows of all channels to one peer
// take: the payloads they retain (sent or not, not yet acknowledged) and
// the room their rings have grown for. Send blocks while a message would
// need more; a channel whose window already has room for a message sends
// it. It bounds the sender's memory however many channels there are, beyond
// a few hundred bytes of state per open channel (and the peer's ring pool,
// at most an eighth of the budget more). A window keeps its rings for its
// next burst; a sender waiting for the budget takes back the rings of empty
// windows (over their share at once, the others once no ack has freed
// anything for 100 ms). Keep it below the receivers' [WithInboundBudget],
// which an honest sender must never pass. Default 12 MiB (one channel
// alone takes at most 1.1 MiB with the default window; across a link it
// caps the peer at 12 MiB per round trip). A producer that outruns the
// connection fills the budget, and its messages wait there: the larger the
// budget, the longer they wait and the colder they are in the cache when
// they are written, while tasks that consume on goroutines of their own
// acknowledge later and need more of it. Measured on loopback (2 cores),
// 10,000 channels: loadgen (receiving tasks inline, runs of up to 64 per
// channel) moved 100-byte messages at 9.3-9.7 M msgs/s with 8 MiB, 8.5 M
// with 12 MiB, 7.0 M with 16 MiB, 6.2-6.6 M with 24-48 MiB (p99 latency 8,
// 12, 20 and 30-67 ms), and 1 KiB at 1.68-1.76, 1.67, 1.59 and 1.28-1.47 M;
// BenchmarkTransport10000ChannelsGoroutine (one message a visit, each task
// on its own goroutine) took 0.85-2.1 µs a message with 8 MiB, 0.58 µs with
// 12 MiB and 0.41 µs with 48 MiB.
func WithPeerBudget(n int) Option { return func(o *options) { o.peerBudget = n } }

// WithInboundBudget limits the memory of the messages received on one
// connection and not yet consumed by their target tasks: their payload
// bytes, and 32 bytes a message for its record. Flow control keeps an
// honest peer far below it; a peer that ignores its windows and passes it
// loses the connection. Default 64 MiB.
func WithInboundBudget(n int) Option { return func(o *options) { o.inboundBudget = n } }

// WithStallAlert makes the node warn in its log when one of its channels
// has had messages unacknowledged and its acknowledged progress (the
// transport's clock of a channel: see health.go) has not advanced for d,
// and note when it moves again or the channel closes; one line each,
// counted in [Stats].Alerts.
// Default [DefaultStallAlert] (10 s, as the engine's global-clock alert);
// 0: no alert.
func WithStallAlert(d time.Duration) Option { return func(o *options) { o.stallAlert = d } }

// WithSlowConsumerAlert makes the node warn in its log when, over an
// interval of d, its senders waited for a peer's credit (its windows or
// the peer budget full) more than half the time, and note when, over an
// interval, they waited less than a quarter of it; one line each, counted
// in [Stats].Alerts. Default [DefaultSlowConsumerAlert] (5 s); 0: no alert.
func WithSlowConsumerAlert(d time.Duration) Option { return func(o *options) { o.slowAlert = d } }

// WithPingInterval sets how often each side of a connection sends a PING:
// for clock samples ([ClockOffset]) and to keep the connection alive under
// [WithIdleTimeout]. A connection also pings once when it opens, and while
// closed channels' numbers wait to be reused. Default 1 s; 0: no periodic
// pings.
func WithPingInterval(d time.Duration) Option { return func(o *options) { o.pingInterval = d } }

// WithClockOffset shifts the node's clock ([Node.Clock]), which its PONGs
// carry to peers, by d: for tests, which give two nodes on one host the
// clocks of two hosts whose clocks disagree by d, and check that the
// peers' [ClockOffset] estimates find d. Default 0; a deployment has no use
// for it.
func WithClockOffset(d time.Duration) Option { return func(o *options) { o.clockOffset = d } }

// WithHandshakeTimeout closes connections whose handshake (preface and,
// with [WithKey], authentication; with [WithTLS], the TLS handshake too) has
// not completed in time. Default 5 s.
func WithHandshakeTimeout(d time.Duration) Option { return func(o *options) { o.handshakeTimeout = d } }

// WithIdleTimeout closes connections on which nothing arrived for d: a
// peer that stopped answering (its host died without closing the socket,
// a network that drops everything) is found and its connection redialled.
// Pings keep healthy connections alive, so d needs a ping interval
// ([WithPingInterval], the peer's as well as this node's) shorter than d,
// a third of it or less to ride out a lost ping; d must not be negative.
// Default 0: never.
func WithIdleTimeout(d time.Duration) Option { return func(o *options) { o.idleTimeout = d } }

// WithDialTimeout bounds one connection attempt; d must be positive (a
// dial without a bound would wait for the kernel to give up, minutes with
// Linux's defaults, before the next attempt). Default 3 s.
func WithDialTimeout(d time.Duration) Option { return func(o *options) { o.dialTimeout = d } }

// WithReconnectBackoff sets the exponential backoff between connection
// attempts; each wait is jittered. Default 10 ms doubling to 2 s.
func WithReconnectBackoff(min, max time.Duration) Option {
	return func(o *options) { o.minBackoff, o.maxBackoff = min, max }
}

// WithEventLoops sets how many gnet event loops the node's connections run
// on. The gnet connections of all nodes in a process share one group of
// loops; nodes that ask for the same number share that group. Default 0:
// the process's default group, GOMAXPROCS-1 loops (at least one), so that a
// P is always left for Go code while every loop waits in epoll_wait (see
// the package documentation). Ignored with [BackendNet].
func WithEventLoops(n int) Option { return func(o *options) { o.eventLoops = n } }

// WithFaults injects faults into this node's connections, for tests and
// load generation: each connection's writes pass through a fault link that
// drops, duplicates, delays and throttles whole frames (and, during a
// partition, holds its writes and leaves its reads for later), and such
// connections leave all writing to their loop (no direct writes, which
// would bypass it). Default none.
func WithFaults(f Faults) Option { return func(o *options) { o.faults = f } }

// WithDeferredFaultClock times the faults of [WithFaults] that come at set
// times, Reset and the partition, from the call of [Node.StartFaultClock]
// rather than from the node's start: until that call no connection is
// reset and none is partitioned. The faults on frames (drops, duplicates,
// delays, the bandwidth cap) apply from the start. Default: the fault
// clock starts with the node.
func WithDeferredFaultClock() Option { return func(o *options) { o.deferFaults = true } }

// WithKey makes the node authenticate every connection with a pre-shared
// key of at least 16 bytes: before any channel opens, both sides prove with
// a challenge-response (HMAC-SHA256 over both sides' nonces and node ids,
// wire/SPEC.md "Authentication") that they hold the same key. A peer with
// another key or none is refused with GOAWAY AUTH_FAILED and an error
// matching [ErrAuthFailed] on both sides; a dialing [Peer] refused so stops
// redialing ([ErrRejected]). The key never appears in logs, errors or
// stats. It is copied when WithKey is called, so the caller
// may wipe its own copy at once. Default: no key, no authentication (and a peer that has
// a key refuses this node).
func WithKey(key []byte) Option {
	k := append([]byte{}, key...) // now: the caller may wipe its copy
	return func(o *options) { o.key = k }
}

// WithTLS encrypts every connection with TLS 1.3 (older versions are
// refused whatever cfg says). The node uses cfg as a server for the
// connections it accepts (cfg needs Certificates) and as a client for those
// it dials (RootCAs, or InsecureSkipVerify when the peers are authenticated
// by [WithKey] instead; ServerName defaults to the peer address's host). The
// config is cloned when the node starts. TLS implies [BackendNet]. Default:
// no TLS.
func WithTLS(cfg *tls.Config) Option { return func(o *options) { o.tls = cfg } }

// WithBackend selects how connections do their I/O: [BackendGnet] (the
// default) or [BackendNet]. [WithTLS] selects BackendNet by itself.
func WithBackend(b Backend) Option { return func(o *options) { o.backend = b } }

// WithMaxConnsPerAddr limits the connections accepted from one remote host
// (IP address) at a time; more are answered with GOAWAY LIMIT and closed at
// once. Default 64.
func WithMaxConnsPerAddr(n int) Option { return func(o *options) { o.maxConnsPerAddr = n } }

// DefaultPeerBudget is the default of [WithPeerBudget].
const DefaultPeerBudget = 12 << 20

// DefaultSocketBuffer is the default of [WithSocketBuffers].
const DefaultSocketBuffer = 1 << 20

// WithSocketBuffers sets the kernel's send and receive buffers (SO_SNDBUF,
// SO_RCVBUF) of every connection, both backends, both ends, to bytes each,
// before the connection opens, so that the window its handshake offers is
// what the buffer holds.
// Flow control already bounds what a node keeps in flight (windows and the
// peer budget); the socket buffers need to hold a round trip's worth of the
// link's throughput (bytes / RTT caps one connection's rate: 1 MiB at a
// 1 ms round trip is 1 GB/s). More only lengthens the queue in front of the
// AckRequests, whose answers then come late and leave many channels short
// of credit, and lets each connection pin more kernel memory (Linux
// reserves up to twice the size asked, each way). On loopback, 10,000
// channels sent one message per visit moved 1.8-2.0 M msgs/s of 100 B with
// 4 MiB buffers and 2.3-2.5 M with 1 MiB; sent in bursts (loadgen's
// producers) they moved the same with either, and a tenth less with
// 256 KiB. Raise it for a long fat link; 0 leaves the sizes to the kernel
// (Linux then grows them up to net.ipv4.tcp_rmem and tcp_wmem). Default
// [DefaultSocketBuffer] (1 MiB).
func WithSocketBuffers(bytes int) Option { return func(o *options) { o.socketBuffer = bytes } }

// WithLogger sets where the node logs connection errors. Default (and
// with a nil l): discard.
func WithLogger(l *slog.Logger) Option {
	if l == nil {
		l = slog.New(slog.DiscardHandler)
	}
	return func(o *options) { o.logger = l }
}

func (o *options) validate() error {
	if err := o.window.Validate(); err != nil {
		return err
	}
	if o.window.MaxBytes <= MaxMessageHead {
		return fmt.Errorf("transport: a window of %d bytes holds no message: each takes its payload and a head of up to %d bytes", o.window.MaxBytes, MaxMessageHead)
	}
	if err := o.loss.Validate(); err != nil {
		return err
	}
	if err := o.batch.Validate(); err != nil {
		return err
	}
	if err := o.faults.validate(); err != nil {
		return err
	}
	switch {
	case o.connsPerPeer < 1:
		return fmt.Errorf("transport: connections per peer must be >= 1, got %d", o.connsPerPeer)
	case o.maxFrame < 1024:
		return fmt.Errorf("transport: max frame must be >= 1024 bytes, got %d", o.maxFrame)
	case o.maxFrame < o.batch.MaxBatchBytes+wire.HeaderLen:
		return fmt.Errorf("transport: max frame %d is below the batch size %d", o.maxFrame, o.batch.MaxBatchBytes)
	case o.peerBudget < o.window.MaxFootprint():
		return fmt.Errorf("transport: peer budget %d is below the memory of one channel's full window, %d bytes", o.peerBudget, o.window.MaxFootprint())
	case o.inboundBudget < o.window.MaxBytes:
		return fmt.Errorf("transport: inbound budget %d is below one channel's window of %d bytes", o.inboundBudget, o.window.MaxBytes)
	case o.eventLoops < 0:
		return fmt.Errorf("transport: event loops must be >= 0 (0: the default), got %d", o.eventLoops)
	case o.minBackoff <= 0 || o.maxBackoff < o.minBackoff:
		return fmt.Errorf("transport: reconnect backoff %v..%v is not a range", o.minBackoff, o.maxBackoff)
	case o.key != nil && len(o.key) < handshake.MinKeyLen:
		return fmt.Errorf("%w: a key of %d bytes is too short, at least %d are needed", ErrBadKey, len(o.key), handshake.MinKeyLen)
	case o.maxChannels < 1:
		return fmt.Errorf("transport: max channels must be >= 1, got %d", o.maxChannels)
	case o.dialTimeout <= 0:
		return fmt.Errorf("transport: dial timeout must be > 0, got %v", o.dialTimeout)
	case o.idleTimeout < 0:
		return fmt.Errorf("transport: idle timeout must be >= 0 (0: never), got %v", o.idleTimeout)
	case o.idleTimeout > 0 && (o.pingInterval <= 0 || o.pingInterval >= o.idleTimeout):
		return fmt.Errorf("transport: an idle timeout of %v needs pings more often than that to keep healthy connections open, got a ping interval of %v (0: none)", o.idleTimeout, o.pingInterval)
	case o.maxReceivers < 1:
		return fmt.Errorf("transport: max receivers must be >= 1, got %d", o.maxReceivers)
	case o.maxConnsPerAddr < 1:
		return fmt.Errorf("transport: max connections per address must be >= 1, got %d", o.maxConnsPerAddr)
	case o.backend != BackendGnet && o.backend != BackendNet:
		return fmt.Errorf("transport: unknown backend %d", o.backend)
	case o.socketBuffer < 0:
		return fmt.Errorf("transport: socket buffers must be >= 0 bytes, got %d", o.socketBuffer)
	case o.handshakeTimeout <= 0:
		return fmt.Errorf("transport: handshake timeout must be > 0, got %v", o.handshakeTimeout)
	case o.stallAlert < 0 || o.slowAlert < 0:
		return fmt.Errorf("transport: alert times must be >= 0 (0: off), got stall %v and slow consumer %v", o.stallAlert, o.slowAlert)
	case o.pingInterval < 0:
		return fmt.Errorf("transport: ping interval must be >= 0 (0: no periodic pings), got %v", o.pingInterval)
	}
	if o.tls != nil {
		o.backend = BackendNet
	}
	return nil
}
