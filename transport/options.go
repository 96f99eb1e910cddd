package transport

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/batch"
	"github.com/sluicehq/sluice/lossdetect"
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
	logger           *slog.Logger
}

func defaultOptions() options {
	return options{
		connsPerPeer:     1,
		window:           window.DefaultConfig(),
		loss:             lossdetect.DefaultConfig(),
		batch:            batch.DefaultConfig(),
		maxFrame:         wire.DefaultMaxFrame,
		maxChannels:      65536,
		peerBudget:       32 << 20,
		inboundBudget:    64 << 20,
		handshakeTimeout: 5 * time.Second,
		idleTimeout:      0,
		pingInterval:     time.Second,
		dialTimeout:      3 * time.Second,
		minBackoff:       10 * time.Millisecond,
		maxBackoff:       2 * time.Second,
		eventLoops:       1,
		logger:           slog.New(slog.DiscardHandler),
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

// WithWindow sets each channel's flow-control window. Default
// window.DefaultConfig().
func WithWindow(c window.Config) Option { return func(o *options) { o.window = c } }

// WithLossDetect sets AckRequest scheduling and ack timeouts. Default
// lossdetect.DefaultConfig().
func WithLossDetect(c lossdetect.Config) Option { return func(o *options) { o.loss = c } }

// WithBatch sets the batching policy. Default batch.DefaultConfig(): flush
// at once when idle, batches of at most 64 KiB.
func WithBatch(c batch.Config) Option { return func(o *options) { o.batch = c } }

// WithCompression offers s2 compression of large batches to peers; a batch
// is compressed only when both sides offered it. Default off.
func WithCompression(on bool) Option { return func(o *options) { o.compress = on } }

// WithMaxFrame limits the body of a frame this node accepts. Default
// wire.DefaultMaxFrame (4 MiB).
func WithMaxFrame(n int) Option { return func(o *options) { o.maxFrame = n } }

// WithMaxChannels limits the channels a peer may open on one connection.
// Default 65536.
func WithMaxChannels(n int) Option { return func(o *options) { o.maxChannels = n } }

// WithPeerBudget limits the payload bytes retained, sent or not yet
// acknowledged, over all channels to one peer; Send blocks beyond it.
// It bounds the sender's memory however many channels there are.
// Default 32 MiB.
func WithPeerBudget(n int) Option { return func(o *options) { o.peerBudget = n } }

// WithInboundBudget limits the payload bytes received on one connection and
// not yet consumed by their target tasks. Flow control keeps an honest peer
// far below it; a peer that ignores its windows and passes it loses the
// connection. Default 64 MiB.
func WithInboundBudget(n int) Option { return func(o *options) { o.inboundBudget = n } }

// WithHandshakeTimeout closes connections whose preface has not arrived in
// time. Default 5 s.
func WithHandshakeTimeout(d time.Duration) Option { return func(o *options) { o.handshakeTimeout = d } }

// WithIdleTimeout closes connections on which nothing arrived for d (pings
// keep healthy connections alive). Default 0: never.
func WithIdleTimeout(d time.Duration) Option { return func(o *options) { o.idleTimeout = d } }

// WithDialTimeout bounds one connection attempt. Default 3 s.
func WithDialTimeout(d time.Duration) Option { return func(o *options) { o.dialTimeout = d } }

// WithReconnectBackoff sets the exponential backoff between connection
// attempts; each wait is jittered. Default 10 ms doubling to 2 s.
func WithReconnectBackoff(min, max time.Duration) Option {
	return func(o *options) { o.minBackoff, o.maxBackoff = min, max }
}

// WithEventLoops sets how many gnet event loops serve each side (accepting
// and dialing). Default 1.
func WithEventLoops(n int) Option { return func(o *options) { o.eventLoops = n } }

// WithFaults injects faults into this node's outgoing traffic, for tests and
// load generation. Default none.
func WithFaults(f Faults) Option { return func(o *options) { o.faults = f } }

// WithLogger sets where the node logs connection errors. Default: discard.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

func (o *options) validate() error {
	if err := o.window.Validate(); err != nil {
		return err
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
	case o.peerBudget < o.window.MaxBytes:
		return fmt.Errorf("transport: peer budget %d is below one channel's window of %d bytes", o.peerBudget, o.window.MaxBytes)
	case o.inboundBudget < o.window.MaxBytes:
		return fmt.Errorf("transport: inbound budget %d is below one channel's window of %d bytes", o.inboundBudget, o.window.MaxBytes)
	case o.eventLoops < 1:
		return fmt.Errorf("transport: event loops must be >= 1, got %d", o.eventLoops)
	case o.minBackoff <= 0 || o.maxBackoff < o.minBackoff:
		return fmt.Errorf("transport: reconnect backoff %v..%v is not a range", o.minBackoff, o.maxBackoff)
	}
	return nil
}
