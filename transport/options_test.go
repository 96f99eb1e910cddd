package transport

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/batch"
	"github.com/sluicehq/sluice/lossdetect"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/window"
)

// The flat options' documented defaults are those of the state machines
// they configure, and each option sets the field it names.
func TestFlatOptionsSetTheConfigsBehindThem(t *testing.T) {
	o := defaultOptions()
	if w := window.DefaultConfig(); w.MaxMessages != DefaultWindowMessages || w.MaxBytes != DefaultWindowBytes {
		t.Errorf("window defaults %d messages, %d bytes; the transport documents %d and %d",
			w.MaxMessages, w.MaxBytes, DefaultWindowMessages, DefaultWindowBytes)
	}
	if o.window != window.DefaultConfig() || o.loss != lossdetect.DefaultConfig() || o.batch != batch.DefaultConfig() {
		t.Errorf("default options %+v %+v %+v are not the packages' defaults", o.window, o.loss, o.batch)
	}
	ms := time.Millisecond
	WithOptions(WithWindow(64, 1<<16), WithAckTimeouts(30*ms, 3*ms, 2*time.Second),
		WithMaxBatch(32<<10), WithLinger(ms, ms, ms))(&o)
	if o.window.MaxMessages != 64 || o.window.MaxBytes != 1<<16 {
		t.Errorf("WithWindow(64, 64 KiB) gave %+v", o.window)
	}
	if o.loss != (lossdetect.Config{InitialAckTimeout: 30 * ms, MinAckTimeout: 3 * ms, MaxAckTimeout: 2 * time.Second}) {
		t.Errorf("WithAckTimeouts(30ms, 3ms, 2s) gave %+v", o.loss)
	}
	if o.batch.MaxBatchBytes != 32<<10 || o.batch.Linger != ms || o.batch.MinLinger != ms || o.batch.MaxLinger != ms {
		t.Errorf("WithMaxBatch(32 KiB), WithLinger(1ms, 1ms, 1ms) gave %+v", o.batch)
	}
	if err := o.validate(); err != nil {
		t.Errorf("valid options refused: %v", err)
	}
	WithAckTimeouts(ms, 2*ms, time.Second)(&o)
	if err := o.validate(); err == nil {
		t.Error("an initial ack timeout below the minimum was accepted")
	}
}

// NewNode refuses a channel or receiver limit below 1, a dial timeout that
// is not positive, a negative idle timeout and one that pings would not
// keep healthy connections under, naming the option and the value, instead
// of reading them as no limit, a dial that fails at once, never, or closing
// healthy connections.
func TestNewNodeRefusesLimitsAndTimeoutsOutOfRange(t *testing.T) {
	for _, c := range []struct {
		opt  Option
		says string
	}{
		{WithMaxChannels(0), "max channels must be >= 1, got 0"},
		{WithMaxChannels(-5), "max channels must be >= 1, got -5"},
		{WithDialTimeout(0), "dial timeout must be > 0, got 0s"},
		{WithDialTimeout(-time.Second), "dial timeout must be > 0, got -1s"},
		{WithIdleTimeout(-time.Second), "idle timeout must be >= 0 (0: never), got -1s"},
		{WithOptions(WithIdleTimeout(time.Second), WithPingInterval(0)), "an idle timeout of 1s needs pings more often than that"},
		{WithOptions(WithIdleTimeout(time.Second), WithPingInterval(time.Second)), "got a ping interval of 1s"},
		{WithMaxReceivers(0), "max receivers must be >= 1, got 0"},
	} {
		n, err := NewNode(c.opt)
		if err == nil {
			n.Abort()
			t.Errorf("NewNode accepted an option it should refuse with %q", c.says)
			continue
		}
		if !strings.Contains(err.Error(), c.says) {
			t.Errorf("NewNode: error %q, want one saying %q", err, c.says)
		}
	}
	for _, opt := range []Option{WithMaxChannels(1), WithDialTimeout(time.Nanosecond), WithIdleTimeout(0), WithMaxReceivers(1),
		WithOptions(WithIdleTimeout(time.Second), WithPingInterval(time.Second-1))} {
		o := defaultOptions()
		opt(&o)
		if err := o.validate(); err != nil {
			t.Errorf("the smallest allowed value was refused: %v", err)
		}
	}
}

// WithNodeID is the id a node announces, by which its peers know it, and
// WithEpoch the epoch of the channels it opens without one, which their
// receivers see; without them a node picks a random odd id and the time it
// started.
func TestNodeIDAndEpochAreTheOnesGiven(t *testing.T) {
	const id, epoch = 0x5eed, 7
	ping := WithPingInterval(10 * time.Millisecond)
	rx, tx, p := newPair(t, []Option{ping}, []Option{ping, WithNodeID(id), WithEpoch(epoch)})
	if tx.ID() != id || tx.Epoch() != epoch {
		t.Fatalf("node id %#x and epoch %d, want %#x and %d", tx.ID(), tx.Epoch(), id, epoch)
	}
	if rx.ID() == 0 || rx.ID()&1 == 0 || rx.Epoch() == epoch || rx.Epoch() == 0 {
		t.Errorf("a node without the options has id %#x and epoch %d: want a random odd id and its start time", rx.ID(), rx.Epoch())
	}
	got := make(chan taskid.Channel, 1)
	dst := taskid.ID{Processor: 2}
	if err := rx.Handle(dst, func(ch taskid.Channel, _ uint64, _ []Message) {
		select {
		case got <- ch:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t, 20*time.Second)
	s, err := p.OpenSender(ctx, taskid.ID{Processor: 1}, dst)
	if err != nil {
		t.Fatal(err)
	}
	if s.Channel().Epoch != epoch {
		t.Errorf("a sender opened without an epoch has epoch %d, want the node's %d", s.Channel().Epoch, epoch)
	}
	if err := s.Send(ctx, 1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	select {
	case ch := <-got:
		if ch != s.Channel() {
			t.Errorf("the receiver got the message on %v, want %v", ch, s.Channel())
		}
	case <-ctx.Done():
		t.Fatal("the message never arrived")
	}
	// The receiver knows the sender by the id it announced: its clock
	// estimate of that id comes from the connection's round trips.
	for {
		if _, ok := rx.ClockOffset(id); ok {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the receiver never measured a round trip with node %#x", id)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if _, ok := rx.ClockOffset(id + 2); ok {
		t.Errorf("the receiver has a clock estimate of node %#x, which it never met", id+2)
	}
}

// An address whose port cannot be dialed is refused by Node.Peer, naming
// it, instead of being redialed until a context ends; a numeric port and a
// service name are taken.
func TestPeerRefusesAnAddressWithoutADialablePort(t *testing.T) {
	n, err := NewNode()
	if err != nil {
		t.Fatal(err)
	}
	defer n.Abort()
	for _, addr := range []string{"127.0.0.1:abc", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:70000", "127.0.0.1:-1", "tcp://127.0.0.1:1", "127.0.0.1"} {
		if p, err := n.Peer(addr); err == nil {
			t.Errorf("Peer(%q) = %v, nil; want an error", addr, p)
		} else if !strings.Contains(err.Error(), fmt.Sprintf("%q", addr)) {
			t.Errorf("Peer(%q): %v does not name the address", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:1", "[::1]:65535", "localhost:9"} {
		if _, err := n.Peer(addr); err != nil {
			t.Errorf("Peer(%q): %v", addr, err)
		}
	}
}
