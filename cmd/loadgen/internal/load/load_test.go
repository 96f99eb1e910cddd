package load

import (
	"bytes"
	"context"
	"errors"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport"
)

// got is one message as the receiver saw it.
type got struct {
	ts, stamped int64
	seq         uint64
	size        int
	filler      bool // the bytes after the header are loadgen's filler
}

// sink receives on channels (0, i) -> (1, i) of a loopback node and keeps
// what arrived on each, in order.
type sink struct {
	mu      sync.Mutex
	chans   [][]got
	total   atomic.Int64
	onCount func(n int64) // called after each run with the total so far
}

func (k *sink) all() [][]got {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.chans
}

// loopback starts a receiving node and a sending node and opens n senders
// between them; both nodes end with the test.
func loopback(t *testing.T, n int, k *sink) []*transport.Sender {
	t.Helper()
	k.chans = make([][]got, n)
	rx, err := transport.NewNode(transport.WithListen("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rx.Abort)
	filler := Payload(4096)
	rx.HandleAll(func(target taskid.ID) transport.Handler {
		ch := int(target.Index)
		return func(_ taskid.Channel, _ uint64, msgs []transport.Message) {
			k.mu.Lock()
			for _, m := range msgs {
				g := got{ts: m.Ts, size: len(m.Payload)}
				if len(m.Payload) >= bench.StampLen {
					g.stamped, g.seq = bench.Stamped(m.Payload)
					g.filler = bytes.Equal(m.Payload[bench.StampLen:], filler[bench.StampLen:len(m.Payload)])
				}
				k.chans[ch] = append(k.chans[ch], g)
			}
			k.mu.Unlock()
			total := k.total.Add(int64(len(msgs)))
			if k.onCount != nil {
				k.onCount(total)
			}
		}
	})
	tx, err := transport.NewNode()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tx.Abort)
	peer, err := tx.Peer(rx.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := peer.WaitConnected(ctx); err != nil {
		t.Fatal(err)
	}
	senders := make([]*transport.Sender, n)
	for i := range senders {
		if senders[i], err = peer.OpenSender(ctx, taskid.ID{Processor: 0, Index: uint32(i)}, taskid.ID{Processor: 1, Index: uint32(i)}); err != nil {
			t.Fatal(err)
		}
	}
	return senders
}

// flush waits until the receiver has acknowledged everything sent.
func flush(t *testing.T, senders []*transport.Sender) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range senders {
		if err := s.Flush(ctx); err != nil {
			t.Fatalf("flush: %v", err)
		}
	}
}

// checkSequences fails unless each channel received sequence numbers 0, 1,
// ... in order, whole payloads of size bytes, and returns the total.
func checkSequences(t *testing.T, chans [][]got, size int) int64 {
	t.Helper()
	var total int64
	for ch, msgs := range chans {
		for i, g := range msgs {
			if g.seq != uint64(i) || g.size != size || !g.filler {
				t.Fatalf("channel %d, message %d: seq %d, %d bytes, filler %v; want seq %d, %d bytes of filler", ch, i, g.seq, g.size, g.filler, i, size)
			}
		}
		total += int64(len(msgs))
	}
	return total
}

func TestPayloadsStampTheirSendTimesAndSequences(t *testing.T) {
	var shift atomic.Int64
	shift.Store(5000)
	p := newPayloads(40, 2, &shift)
	decode := func(b []byte) (int64, uint64) {
		if len(b) != 40 || !bytes.Equal(b[bench.StampLen:], Payload(40)[bench.StampLen:]) {
			t.Fatalf("payload %q is not 40 bytes with loadgen's filler", b)
		}
		return bench.Stamped(b)
	}
	if at, seq := decode(p.next(1, 1000)); at != 6000 || seq != 0 {
		t.Errorf("first payload of channel 1 stamped (%d, %d), want (6000, 0)", at, seq)
	}
	// Until it is sent, the next payload reuses the sequence number.
	if at, seq := decode(p.next(1, 1500)); at != 6500 || seq != 0 {
		t.Errorf("a payload not sent yet was followed by (%d, %d), want (6500, 0)", at, seq)
	}
	p.sent(1, 1)
	shift.Store(-300) // the clock corrector moved
	if at, seq := decode(p.next(1, 2000)); at != 1700 || seq != 1 {
		t.Errorf("second payload of channel 1 stamped (%d, %d), want (1700, 1)", at, seq)
	}
	if _, seq := decode(p.next(0, 2000)); seq != 0 {
		t.Errorf("channel 0 starts at seq %d, want 0: channels count apart", seq)
	}
	p.sent(1, 1)
	run := p.newRun(3)
	p.stamp(run, 1, 3000)
	for i, m := range run {
		at, seq := decode(m.Payload)
		if m.Ts != 3000 || at != 2700 || seq != uint64(2+i) {
			t.Errorf("run message %d: ts %d, stamped (%d, %d); want ts 3000 (unshifted), (2700, %d)", i, m.Ts, at, seq, 2+i)
		}
	}
	if &run[0].Payload[0] == &run[1].Payload[0] || &run[0].Payload[0] == &p.buf[0] {
		t.Error("a run's payloads share a buffer")
	}
	if q := newPayloads(bench.StampLen, 1, nil); q.sendTime(123) != 123 {
		t.Errorf("without a shift, send time 123 stamps as %d", q.sendTime(123))
	}
}

// FixedRate stamps message i, on sender i mod n, with the schedule's start
// plus i/rate, computed here from the Result's start.
func TestFixedRateStampsItsSchedule(t *testing.T) {
	const channels, rate = 3, 5000.0
	var shift atomic.Int64
	shift.Store(7)
	k := &sink{}
	senders := loopback(t, channels, k)
	cfg := Config{Size: 64, Duration: 100 * time.Millisecond, Rate: rate, Shift: &shift}
	res, err := FixedRate(t.Context(), cfg, senders)
	if err != nil {
		t.Fatal(err)
	}
	flush(t, senders)
	chans := k.all()
	want := int64(math.Ceil(cfg.Duration.Seconds() * rate))
	if n := checkSequences(t, chans, 64); res.Sent != want || n != want {
		t.Fatalf("sent %d, received %d; want %d, every message due within %v", res.Sent, n, want, cfg.Duration)
	}
	for ch, msgs := range chans {
		for seq, g := range msgs {
			i := int64(seq)*channels + int64(ch)
			intended := res.Start + int64(math.Round(float64(i)*1e9/rate))
			if g.ts != intended || g.stamped != intended+7 {
				t.Fatalf("message %d (channel %d, seq %d): ts %d, stamped %d; want %d and %d (shifted by 7)", i, ch, seq, g.ts, g.stamped, intended, intended+7)
			}
		}
	}
}

// MaxRate and Count as fast as they go stop when their context ends (an
// error for Count, which did not send its n; not for MaxRate) and report
// what they really sent: once flushed, the receiver holds exactly that many.
func TestStrategiesStopOnCancelAndCountWhatTheySent(t *testing.T) {
	for _, tt := range []struct {
		name    string
		run     func(ctx context.Context, senders []*transport.Sender) (int64, error)
		wantErr error
	}{
		{"MaxRate", func(ctx context.Context, senders []*transport.Sender) (int64, error) {
			return MaxRate(ctx, Config{Size: 32, Duration: time.Hour, Producers: 2}, senders)
		}, nil},
		{"Count", func(ctx context.Context, senders []*transport.Sender) (int64, error) {
			return Count(ctx, Config{Size: 32, Producers: 2}, math.MaxInt64, senders)
		}, context.Canceled},
	} {
		t.Run(tt.name, func(t *testing.T) {
			const stopAt = 20000
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			k := &sink{onCount: func(n int64) {
				if n >= stopAt {
					cancel()
				}
			}}
			senders := loopback(t, 4, k)
			sent, err := tt.run(ctx, senders)
			if !errors.Is(err, tt.wantErr) { // a nil wantErr wants a nil err
				t.Fatalf("after a cancel: error %v, want %v", err, tt.wantErr)
			}
			if ctx.Err() == nil {
				t.Fatal("returned before its context ended")
			}
			flush(t, senders)
			if n := checkSequences(t, k.all(), 32); sent < stopAt || n != sent {
				t.Fatalf("says it sent %d; the receiver got %d; want the same, at least %d", sent, n, stopAt)
			}
		})
	}
}

func TestCountSendsExactlyN(t *testing.T) {
	for _, tt := range []struct {
		name      string
		rate      float64
		producers int
		n         int64
	}{
		{"as fast as they go", 0, 1, 1000},
		{"as fast as they go, two producers sharing the count", 0, 2, 100_003},
		{"at a fixed rate", 50000, 1, 1000},
	} {
		t.Run(tt.name, func(t *testing.T) {
			k := &sink{}
			senders := loopback(t, 3, k)
			var progress atomic.Int64
			sent, err := Count(t.Context(), Config{Size: 20, Rate: tt.rate, Producers: tt.producers, Sent: &progress}, tt.n, senders)
			if err != nil {
				t.Fatal(err)
			}
			flush(t, senders)
			chans := k.all()
			if n := checkSequences(t, chans, 20); sent != tt.n || n != tt.n || progress.Load() != tt.n {
				t.Fatalf("sent %d, received %d, progress %d; want %d each", sent, n, progress.Load(), tt.n)
			}
			if tt.rate == 0 {
				return // channels take what their credit allows
			}
			if len(chans[0]) != 334 || len(chans[1]) != 333 || len(chans[2]) != 333 {
				t.Errorf("per channel %d, %d, %d; want 334, 333, 333 (round robin)", len(chans[0]), len(chans[1]), len(chans[2]))
			}
		})
	}
}

func TestEachSendsWhatItSays(t *testing.T) {
	k := &sink{}
	senders := loopback(t, 1, k)
	sent, err := Each(t.Context(), Config{Size: 100, Duration: 50 * time.Millisecond}, senders[0])
	if err != nil {
		t.Fatal(err)
	}
	flush(t, senders)
	if n := checkSequences(t, k.all(), 100); sent == 0 || n != sent {
		t.Fatalf("Each says it sent %d; the receiver got %d", sent, n)
	}
}

func TestStrategiesRefuseWhatTheyCannotSend(t *testing.T) {
	k := &sink{}
	senders := loopback(t, 1, k)
	small := Config{Size: bench.StampLen - 1, Duration: time.Second, Rate: 1000}
	ok := Config{Size: bench.StampLen, Duration: time.Second, Rate: 1000}
	for name, run := range map[string]func() error{
		"MaxRate with a payload too small":   func() error { _, err := MaxRate(t.Context(), small, senders); return err },
		"FixedRate with a payload too small": func() error { _, err := FixedRate(t.Context(), small, senders); return err },
		"Count with a payload too small":     func() error { _, err := Count(t.Context(), small, 1, senders); return err },
		"Each with a payload too small":      func() error { _, err := Each(t.Context(), small, senders[0]); return err },
		"MaxRate without senders":            func() error { _, err := MaxRate(t.Context(), ok, nil); return err },
		"FixedRate without senders":          func() error { _, err := FixedRate(t.Context(), ok, nil); return err },
		"Count without senders":              func() error { _, err := Count(t.Context(), ok, 1, nil); return err },
	} {
		if err := run(); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}
	if n := k.total.Load(); n != 0 {
		t.Errorf("the refused runs sent %d messages", n)
	}
}
