package watermill

import (
	"log/slog"
	"time"

	"github.com/sluicehq/sluice/transport"
)

// Defaults of the options.
const (
	DefaultBacklogMessages = 1024
	DefaultBacklogBytes    = 1 << 20
	DefaultCloseTimeout    = 10 * time.Second
	DefaultListen          = "127.0.0.1:0"
)

// An Option configures a Publisher or a Subscriber; each says which it
// applies to and its default.
type Option func(*options)

type options struct {
	node         []transport.Option
	backlogMsgs  int
	backlogBytes int
	closeTimeout time.Duration
	listen       string
	advertise    string
	log          *slog.Logger
}

func newOptions(opts []Option) options {
	o := options{
		backlogMsgs:  DefaultBacklogMessages,
		backlogBytes: DefaultBacklogBytes,
		closeTimeout: DefaultCloseTimeout,
		listen:       DefaultListen,
		log:          slog.New(slog.DiscardHandler),
	}
	for _, opt := range opts {
		opt(&o)
	}
	return o
}

// WithNodeOptions passes options to the Sluice node the Publisher or
// Subscriber starts (windows, batching, keys, TLS; see package transport).
// Default none. A Subscriber's listening address is set by WithListen.
func WithNodeOptions(opts ...transport.Option) Option {
	return func(o *options) { o.node = append(o.node, opts...) }
}

// WithBacklog bounds, per topic, the messages a Publisher keeps while no
// subscription of the topic is announced: at most msgs messages and bytes
// encoded bytes. Publish blocks while the backlog is full, until a
// subscription appears, the message's context ends or the Publisher closes.
// Default DefaultBacklogMessages and DefaultBacklogBytes.
func WithBacklog(msgs, bytes int) Option {
	return func(o *options) { o.backlogMsgs, o.backlogBytes = max(0, msgs), max(0, bytes) }
}

// WithCloseTimeout bounds how long Publisher.Close waits for its messages
// to be acknowledged by their subscribers. Default DefaultCloseTimeout.
func WithCloseTimeout(d time.Duration) Option {
	return func(o *options) { o.closeTimeout = d }
}

// WithListen sets the address a Subscriber's node listens on. Default
// DefaultListen (loopback, a port the system chooses).
func WithListen(addr string) Option {
	return func(o *options) { o.listen = addr }
}

// WithAdvertise sets the address a Subscriber announces to publishers,
// when it is not the one its node listens on (":7400" listens on every
// interface; publishers need one they can dial). Default: the listening
// address, as the node reports it.
func WithAdvertise(addr string) Option {
	return func(o *options) { o.advertise = addr }
}

// WithLogger sets where the Publisher or Subscriber logs what it drops (a
// message that does not decode, a subscription it cannot reach). Default:
// discard.
func WithLogger(l *slog.Logger) Option {
	return func(o *options) { o.log = l }
}
