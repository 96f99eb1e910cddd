package window

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func smallConfig(msgs, bytes int) Config {
	c := DefaultConfig()
	c.MaxMessages, c.MaxBytes = msgs, bytes
	return c
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		errHas string // "" means valid
	}{
		{"the defaults are valid", func(*Config) {}, ""},
		{"a window of zero messages is rejected", func(c *Config) { c.MaxMessages = 0 }, "MaxMessages must be in [1, 16777216], got 0"},
		{"a window of more messages than the limit is rejected", func(c *Config) { c.MaxMessages = MaxMessagesLimit + 1 }, "MaxMessages"},
		{"a window of zero bytes is rejected", func(c *Config) { c.MaxBytes = 0 }, "MaxBytes must be in [1, 1073741824], got 0"},
		{"a window above 1 GiB is rejected", func(c *Config) { c.MaxBytes = MaxBytesLimit + 1 }, "MaxBytes"},
		{"a share of zero is rejected", func(c *Config) { c.AckRequestShare = 0 }, "AckRequestShare"},
		{"a share above one is rejected", func(c *Config) { c.AckRequestShare = 1.5 }, "AckRequestShare"},
		{"a NaN share is rejected", func(c *Config) { c.AckRequestShare = math.NaN() }, "AckRequestShare"},
		{"a share of exactly one is valid", func(c *Config) { c.AckRequestShare = 1 }, ""},
		{"a zero quiet time is rejected", func(c *Config) { c.QuietAfter = 0 }, "QuietAfter must be > 0"},
		{"a one-message one-byte window is valid", func(c *Config) { c.MaxMessages, c.MaxBytes = 1, 1 }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.change(&c)
			err := c.Validate()
			if tt.errHas == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.errHas) || !strings.HasPrefix(err.Error(), "window: ") {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.errHas)
			}
		})
	}
}

func TestNewSenderPanicsOnInvalidConfig(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("NewSender with MaxMessages 0 did not panic")
		}
	}()
	NewSender(smallConfig(0, 10), 0)
}

func TestDefaultConfigValues(t *testing.T) {
	c := DefaultConfig()
	if c.MaxMessages != 4096 || c.MaxBytes != 1<<20 || c.AckRequestShare != 0.25 || c.QuietAfter != 200*time.Microsecond {
		t.Fatalf("DefaultConfig() = %+v", c)
	}
}

func TestPush(t *testing.T) {
	tests := []struct {
		name     string
		cfg      Config
		first    uint64
		sizes    []int // pushed in order before the checked push
		size     int
		wantErr  error
		wantSeq  uint64
		wantMsgs int
	}{
		{"the first push gets the first seq", smallConfig(4, 100), 7, nil, 10, nil, 7, 1},
		{"pushes get consecutive seqs", smallConfig(4, 100), 7, []int{1, 2}, 3, nil, 9, 3},
		{"an empty payload is a message", smallConfig(4, 100), 0, nil, 0, nil, 0, 1},
		{"a payload of exactly MaxBytes fits an empty window", smallConfig(4, 100), 0, nil, 100, nil, 0, 1},
		{"a payload larger than MaxBytes is too large", smallConfig(4, 100), 0, nil, 101, ErrTooLarge, 0, 0},
		{"a full message window has no credit", smallConfig(2, 100), 0, []int{1, 1}, 1, ErrNoCredit, 0, 2},
		{"a full byte window has no credit", smallConfig(8, 100), 0, []int{60, 30}, 11, ErrNoCredit, 0, 2},
		{"a payload that exactly fills the byte window fits", smallConfig(8, 100), 0, []int{60, 30}, 10, nil, 2, 3},
		{"the last usable seq is MaxUint64-1", smallConfig(4, 100), math.MaxUint64 - 1, nil, 1, nil, math.MaxUint64 - 1, 1},
		{"seqs run out at MaxUint64", smallConfig(4, 100), math.MaxUint64 - 1, []int{1}, 1, ErrSeqExhausted, 0, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSender(tt.cfg, tt.first)
			for _, n := range tt.sizes {
				if _, err := s.Push(1, make([]byte, n)); err != nil {
					t.Fatalf("setup Push(%d): %v", n, err)
				}
			}
			if got := s.HasCredit(tt.size); got != (tt.wantErr == nil) {
				t.Errorf("HasCredit(%d) = %v, want %v", tt.size, got, tt.wantErr == nil)
			}
			seq, err := s.Push(42, bytes.Repeat([]byte{'x'}, tt.size))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Push = %v, want %v", err, tt.wantErr)
			}
			if err == nil && seq != tt.wantSeq {
				t.Errorf("seq = %d, want %d", seq, tt.wantSeq)
			}
			if msgs, _ := s.Retained(); msgs != tt.wantMsgs {
				t.Errorf("Retained msgs = %d, want %d", msgs, tt.wantMsgs)
			}
			if err == nil {
				ts, p := s.Message(seq)
				if ts != 42 || len(p) != tt.size || p == nil {
					t.Errorf("Message(%d) = %d, %d bytes (nil=%v)", seq, ts, len(p), p == nil)
				}
			}
		})
	}
}

func TestPushCopiesThePayload(t *testing.T) {
	s := NewSender(DefaultConfig(), 0)
	p := []byte("hello")
	seq, _ := s.Push(5, p)
	copy(p, "XXXXX")
	if _, got := s.Message(seq); string(got) != "hello" {
		t.Fatalf("Message after the caller reused its buffer = %q, want hello", got)
	}
}

func TestHasCreditRejectsHostileSizes(t *testing.T) {
	s := NewSender(smallConfig(4, 100), 0)
	for _, n := range []int{-1, math.MinInt, 101, math.MaxInt} {
		if s.HasCredit(n) {
			t.Errorf("HasCredit(%d) = true", n)
		}
	}
}

func TestMessageOutsideRetention(t *testing.T) {
	s := NewSender(smallConfig(4, 100), 10)
	s.Push(1, []byte("a"))
	s.Push(2, []byte("b"))
	s.MarkSent(12)
	s.Ack(11)
	for _, seq := range []uint64{0, 9, 10, 12, math.MaxUint64} {
		if ts, p := s.Message(seq); ts != 0 || p != nil {
			t.Errorf("Message(%d) = %d, %q; want 0, nil", seq, ts, p)
		}
	}
	if ts, p := s.Message(11); ts != 2 || string(p) != "b" {
		t.Errorf("Message(11) = %d, %q", ts, p)
	}
}

// AppendStored and StoredLen panic, as documented, for any range that is not
// within [Acked(), NextSeq()): one starting beyond NextSeq() too, which
// would otherwise read records of messages long freed (or never pushed).
func TestAppendStoredPanicsOutsideTheRetainedMessages(t *testing.T) {
	s := NewSender(smallConfig(4, 100), 10)
	for _, p := range []string{"a", "b", "c", "d"} {
		s.Push(1, []byte(p))
	}
	s.MarkSent(14)
	s.Ack(12) // retained: 12 "c" and 13 "d"; the ring still holds "a" and "b"
	for _, r := range []struct {
		seq uint64
		k   int
	}{{11, 1}, {12, 3}, {14, 1}, {15, 0}, {15, 1}, {17, 1}, {math.MaxUint64, 1}} {
		for _, call := range []string{"AppendStored", "StoredLen"} {
			func() {
				defer func() {
					if recover() == nil {
						t.Errorf("%s(%d, %d) with [12, 14) retained did not panic", call, r.seq, r.k)
					}
				}()
				if call == "AppendStored" {
					t.Logf("AppendStored(%d, %d) = %q", r.seq, r.k, s.AppendStored(nil, r.seq, r.k))
				} else {
					t.Logf("StoredLen(%d, %d) = %d", r.seq, r.k, s.StoredLen(r.seq, r.k))
				}
			}()
		}
	}
}

// cursors is the Sender's observable position.
type cursors struct{ acked, toSend, next, sentHigh uint64 }

func cursorsOf(s *Sender) cursors {
	return cursors{s.Acked(), s.NextToSend(), s.NextSeq(), s.SentHigh()}
}

func TestCursors(t *testing.T) {
	// Each case starts from 5 pushed messages (seqs 100..104), 4 sent, none acked.
	tests := []struct {
		name      string
		op        func(s *Sender) (int, error)
		wantN     int
		wantErr   error
		want      cursors
		wantBytes int
	}{
		{"marking fewer than sent is a no-op", func(s *Sender) (int, error) { return 0, s.MarkSent(102) }, 0, nil, cursors{100, 104, 105, 104}, 50},
		{"marking all sent moves the cursor", func(s *Sender) (int, error) { return 0, s.MarkSent(105) }, 0, nil, cursors{100, 105, 105, 105}, 50},
		{"marking beyond pushed is refused", func(s *Sender) (int, error) { return 0, s.MarkSent(106) }, 0, ErrOutOfRange, cursors{100, 104, 105, 104}, 50},
		{"marking MaxUint64 is refused", func(s *Sender) (int, error) { return 0, s.MarkSent(math.MaxUint64) }, 0, ErrOutOfRange, cursors{100, 104, 105, 104}, 50},
		{"an ack frees what is below next", func(s *Sender) (int, error) { return s.Ack(102) }, 2, nil, cursors{102, 104, 105, 104}, 30},
		{"an ack of everything sent frees it", func(s *Sender) (int, error) { return s.Ack(104) }, 4, nil, cursors{104, 104, 105, 104}, 10},
		{"an ack of the first seq frees nothing", func(s *Sender) (int, error) { return s.Ack(100) }, 0, nil, cursors{100, 104, 105, 104}, 50},
		{"an ack below the first seq frees nothing", func(s *Sender) (int, error) { return s.Ack(3) }, 0, nil, cursors{100, 104, 105, 104}, 50},
		{"an ack of a pushed but unsent seq is refused", func(s *Sender) (int, error) { return s.Ack(105) }, 0, ErrAckBeyondSent, cursors{100, 104, 105, 104}, 50},
		{"an ack of a seq never pushed is refused", func(s *Sender) (int, error) { return s.Ack(math.MaxUint64) }, 0, ErrAckBeyondSent, cursors{100, 104, 105, 104}, 50},
		{"a rewind moves the cursor back", func(s *Sender) (int, error) { return s.Rewind(101) }, 3, nil, cursors{100, 101, 105, 104}, 50},
		{"a rewind to the cursor resends nothing", func(s *Sender) (int, error) { return s.Rewind(104) }, 0, nil, cursors{100, 104, 105, 104}, 50},
		{"a rewind beyond the cursor is refused", func(s *Sender) (int, error) { return s.Rewind(105) }, 0, ErrOutOfRange, cursors{100, 104, 105, 104}, 50},
		{"a rewind below the acked seq is refused", func(s *Sender) (int, error) { return s.Rewind(99) }, 0, ErrOutOfRange, cursors{100, 104, 105, 104}, 50},
		{"a late ack after a rewind moves the cursor up", func(s *Sender) (int, error) {
			s.Rewind(100)
			return s.Ack(103)
		}, 3, nil, cursors{103, 103, 105, 104}, 20},
		{"a rewound message can be acked up to the highest sent", func(s *Sender) (int, error) {
			s.Rewind(100)
			return s.Ack(104)
		}, 4, nil, cursors{104, 104, 105, 104}, 10},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSender(smallConfig(8, 1000), 100)
			for i := range 5 {
				if _, err := s.Push(int64(i), make([]byte, 10)); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.MarkSent(104); err != nil {
				t.Fatal(err)
			}
			n, err := tt.op(s)
			if !errors.Is(err, tt.wantErr) || n != tt.wantN {
				t.Fatalf("got (%d, %v), want (%d, %v)", n, err, tt.wantN, tt.wantErr)
			}
			if got := cursorsOf(s); got != tt.want {
				t.Errorf("cursors = %+v, want %+v", got, tt.want)
			}
			if _, b := s.Retained(); b != tt.wantBytes {
				t.Errorf("retained bytes = %d, want %d", b, tt.wantBytes)
			}
			if s.Unsent() != int(tt.want.next-tt.want.toSend) {
				t.Errorf("Unsent = %d", s.Unsent())
			}
		})
	}
}

func TestRequestDue(t *testing.T) {
	tests := []struct {
		name  string
		cfg   Config
		sizes []int
		want  bool
	}{
		{"nothing sent is not due", smallConfig(8, 1000), nil, false},
		{"a quarter of the messages is due", smallConfig(8, 1000), []int{1, 1}, true},
		{"less than a quarter of the messages is not due", smallConfig(8, 1000), []int{1}, false},
		{"a quarter of the bytes is due", smallConfig(8, 1000), []int{250}, true},
		{"less than a quarter of the bytes is not due", smallConfig(8, 1000), []int{249}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewSender(tt.cfg, 0)
			for _, n := range tt.sizes {
				s.Push(0, make([]byte, n))
			}
			s.MarkSent(s.NextSeq())
			if got := s.RequestDue(); got != tt.want {
				t.Fatalf("RequestDue() = %v, want %v", got, tt.want)
			}
			s.MarkRequested()
			if s.RequestDue() {
				t.Fatal("RequestDue() after MarkRequested = true")
			}
		})
	}
}

func TestRequestDueCountsResends(t *testing.T) {
	s := NewSender(smallConfig(8, 1000), 0)
	s.Push(0, nil)
	s.MarkSent(1)
	s.Rewind(0)
	s.MarkSent(1)
	if !s.RequestDue() {
		t.Fatal("a message sent twice does not count twice")
	}
}

// TestRandomAgainstModel drives Senders with random pushes of random sizes,
// sends, acks, rewinds and trims, and checks every retained payload against
// a plain copy, the credit rules, and the memory bound. Two Senders run
// side by side, interleaved, as a transport's channels do.
func TestRandomAgainstModel(t *testing.T) {
	seeds := 40
	if testing.Short() {
		seeds = 15
	}
	for seed := range seeds {
		rng := rand.New(rand.NewPCG(uint64(seed), 7))
		ms := []*modelRun{newModelRun(t, seed, rng), newModelRun(t, seed, rng)}
		sharePool(ms, seed)
		for step := range 6000 {
			ms[rng.IntN(len(ms))].step(step)
		}
	}
}

// sharePool makes the Senders of ms share one Pool, for two seeds in
// three: a small one (which must drop rings) or a large one. A ring handed
// out while another Sender still used it would show as a payload that
// differs from the model's.
func sharePool(ms []*modelRun, seed int) {
	var p *Pool
	switch seed % 3 {
	case 1:
		p = NewPool(2048)
	case 2:
		p = NewPool(1 << 20)
	default:
		return
	}
	for _, m := range ms {
		m.s.UsePool(p)
		m.shared = p
	}
}

// intner chooses a modelRun's steps: a seeded generator, or a fuzzer's bytes.
type intner interface{ IntN(n int) int }

// modelRun is one Sender beside a plain model of what it must retain.
type modelRun struct {
	t        *testing.T
	seed     int
	rng      intner
	cfg      Config
	s        *Sender
	pool     []byte
	model    map[uint64][]byte // payloads
	heads    map[uint64][]byte // heads of messages pushed with PushHead
	sentHigh uint64
	shared   *Pool // the Senders' pool, if any
}

func newModelRun(t *testing.T, seed int, rng *rand.Rand) *modelRun {
	cfg := smallConfig(1+rng.IntN(64), 1+rng.IntN(4096))
	first := rng.Uint64() >> 1
	m := &modelRun{t: t, seed: seed, rng: rng, cfg: cfg, s: NewSender(cfg, first),
		pool: make([]byte, 2*cfg.MaxBytes+2), model: map[uint64][]byte{}, heads: map[uint64][]byte{}, sentHigh: first}
	for i := range m.pool {
		m.pool[i] = byte(rng.Uint32())
	}
	return m
}

func (m *modelRun) step(step int) {
	t, seed, rng, cfg, s, model := m.t, m.seed, m.rng, m.cfg, m.s, m.model
	t.Helper()
	switch r := rng.IntN(11); {
	case r < 5:
		n := rng.IntN(cfg.MaxBytes/2 + 2)
		if rng.IntN(10) == 0 {
			n = rng.IntN(cfg.MaxBytes + 1)
		}
		o := rng.IntN(len(m.pool) - n + 1)
		p := m.pool[o : o+n : o+n] // never modified: the model may alias it
		var head []byte
		if rng.IntN(2) == 0 {
			hn := rng.IntN(min(16, len(m.pool)+1)) // the pool is 2*MaxBytes+2 long, 4 bytes at least
			o := rng.IntN(len(m.pool) - hn + 1)
			head = m.pool[o : o+hn : o+hn]
		}
		msgs, b := s.Retained()
		credit := s.HasCredit(len(head) + n)
		cost, costOK := s.PushCost(len(head) + n)
		fp := s.Footprint()
		var seq uint64
		var err error
		tried, pushed := false, false
		if rng.IntN(2) == 0 { // TryPushHead first, as the transport does
			tried = true
			before := cursorsOf(s)
			seq, pushed = s.TryPushHead(int64(step), head, p)
			if want := credit && cost == 0; pushed != want {
				t.Fatalf("seed %d step %d: TryPushHead(%d bytes) = %v; credit %v, PushCost %d", seed, step, len(head)+n, pushed, credit, cost)
			}
			if !pushed && (cursorsOf(s) != before || s.Footprint() != fp) {
				t.Fatalf("seed %d step %d: a refused TryPushHead changed the window: %+v -> %+v, footprint %d -> %d", seed, step, before, cursorsOf(s), fp, s.Footprint())
			}
		}
		if !pushed {
			seq, err = s.PushHead(int64(step), head, p)
		}
		if tried && pushed && s.Footprint() != fp {
			t.Fatalf("seed %d step %d: TryPushHead grew the rings %d -> %d", seed, step, fp, s.Footprint())
		}
		if credit != (err == nil) || costOK != credit {
			t.Fatalf("seed %d: HasCredit(%d) = %v, PushCost ok = %v, but Push err = %v", seed, n, credit, costOK, err)
		}
		if grew := s.Footprint() - fp; err == nil && grew != cost {
			t.Fatalf("seed %d step %d: PushCost(%d) = %d but the rings grew by %d", seed, step, n, cost, grew)
		}
		if err == nil {
			if seq != s.NextSeq()-1 {
				t.Fatalf("seed %d: Push gave seq %d, NextSeq is now %d", seed, seq, s.NextSeq())
			}
			model[seq], m.heads[seq] = p, head
		} else if msgs < cfg.MaxMessages && b+len(head)+n <= cfg.MaxBytes && msgs == 0 {
			t.Fatalf("seed %d: an empty window refused %d bytes: %v", seed, n, err)
		}
	case r < 7:
		through := s.NextToSend() + uint64(rng.IntN(s.Unsent()+1))
		if err := s.MarkSent(through); err != nil {
			t.Fatal(err)
		}
		m.sentHigh = max(m.sentHigh, through)
	case r < 9:
		next := s.Acked() + uint64(rng.IntN(int(m.sentHigh-s.Acked())+1))
		freed, err := s.Ack(next)
		if err != nil {
			t.Fatal(err)
		}
		for seq := next - uint64(freed); seq < next; seq++ {
			delete(model, seq)
			delete(m.heads, seq)
		}
	case r < 10:
		to := s.Acked() + uint64(rng.IntN(int(s.NextToSend()-s.Acked())+1))
		if _, err := s.Rewind(to); err != nil {
			t.Fatal(err)
		}
	default:
		fp := s.Footprint()
		if freed := s.Trim(); freed != fp-s.Footprint() || freed < 0 {
			t.Fatalf("seed %d step %d: Trim freed %d, the footprint went %d -> %d", seed, step, freed, fp, s.Footprint())
		}
		if msgs, _ := s.Retained(); msgs == 0 && s.Footprint() != 0 {
			t.Fatalf("seed %d step %d: an empty window trimmed to %d bytes, want 0", seed, step, s.Footprint())
		}
	}
	msgs, b := s.Retained()
	if msgs != len(model) || msgs > cfg.MaxMessages || b > cfg.MaxBytes || len(s.buf) > cfg.MaxBytes {
		t.Fatalf("seed %d step %d: retained %d msgs %d bytes (ring %d), model %d, cfg %+v", seed, step, msgs, b, len(s.buf), len(model), cfg)
	}
	if s.NextSeq()-s.Acked() != uint64(len(model)) {
		t.Fatalf("seed %d: cursors %+v, model %d", seed, cursorsOf(s), len(model))
	}
	sum := 0
	for seq := s.Acked(); seq < s.NextSeq(); seq++ {
		_, p := s.Message(seq)
		if !bytes.Equal(p, model[seq]) {
			t.Fatalf("seed %d step %d: Message(%d) = %x, want %x", seed, step, seq, p, model[seq])
		}
		stored := append(append([]byte{}, m.heads[seq]...), model[seq]...)
		if got := s.Stored(seq); !bytes.Equal(got, stored) {
			t.Fatalf("seed %d step %d: Stored(%d) = %x, want %x", seed, step, seq, got, stored)
		}
		sum += len(stored)
	}
	if sum != b {
		t.Fatalf("seed %d: retained bytes %d, heads and payloads sum to %d", seed, b, sum)
	}
	unsent := 0
	for seq := s.NextToSend(); seq < s.NextSeq(); seq++ {
		unsent += len(m.heads[seq]) + len(model[seq])
	}
	if got := s.UnsentBytes(); got != unsent {
		t.Fatalf("seed %d step %d: UnsentBytes %d, the unsent heads and payloads sum to %d", seed, step, got, unsent)
	}
	if msgs > 0 {
		// A run of stored messages from anywhere, across the ring's wrap.
		from := s.Acked() + uint64(rng.IntN(msgs))
		k := rng.IntN(int(s.NextSeq()-from) + 1)
		var want []byte
		for seq := from; seq < from+uint64(k); seq++ {
			want = append(append(want, m.heads[seq]...), model[seq]...)
		}
		got := s.AppendStored([]byte("x"), from, k)
		if !bytes.Equal(got[1:], want) || got[0] != 'x' || s.StoredLen(from, k) != len(want) {
			t.Fatalf("seed %d step %d: AppendStored(%d, %d) = %d bytes, StoredLen %d, want %d bytes", seed, step, from, k, len(got)-1, s.StoredLen(from, k), len(want))
		}
	}
	if m.shared != nil && m.shared.Held() > m.shared.max {
		t.Fatalf("seed %d step %d: the pool holds %d bytes, over its bound %d", seed, step, m.shared.Held(), m.shared.max)
	}
}

// FuzzSenderOps drives two Senders with steps the fuzzer chooses (each
// byte pair one choice) and checks them against their models as
// TestRandomAgainstModel does.
func FuzzSenderOps(f *testing.F) {
	f.Add(uint64(1), []byte{0, 0, 5, 0, 7, 0, 9, 0, 10, 0})
	f.Add(uint64(7), []byte("pushes, sends, acks, rewinds and trims in any order"))
	f.Fuzz(func(t *testing.T, seed uint64, steps []byte) {
		rng := rand.New(rand.NewPCG(seed, 7))
		src := &byteSource{b: steps}
		ms := []*modelRun{newModelRun(t, int(seed), rng), newModelRun(t, int(seed), rng)}
		sharePool(ms, int(seed%3))
		for _, m := range ms {
			m.rng = src
		}
		for step := 0; len(src.b) > 0; step++ {
			ms[src.IntN(2)].step(step)
		}
	})
}

// byteSource makes choices from a fuzzer's bytes, two per choice, and
// chooses 0 once they run out.
type byteSource struct{ b []byte }

func (s *byteSource) IntN(n int) int {
	var v int
	for range 2 {
		if len(s.b) > 0 {
			v = v<<8 | int(s.b[0])
			s.b = s.b[1:]
		}
	}
	return v % n
}

// TestSmallPayloadsUseTheWholeByteWindow checks that fragmentation at the
// ring's end costs less than one payload of credit.
func TestSmallPayloadsUseTheWholeByteWindow(t *testing.T) {
	s := NewSender(smallConfig(1<<20, 1000), 0)
	p := make([]byte, 7)
	for round := range 2000 {
		for s.HasCredit(len(p)) {
			if _, err := s.Push(0, p); err != nil {
				t.Fatal(err)
			}
		}
		if _, b := s.Retained(); b+2*len(p) <= 1000 {
			t.Fatalf("round %d: no credit with only %d of 1000 bytes retained", round, b)
		}
		s.MarkSent(s.NextSeq())
		s.Ack(s.Acked() + uint64(1+round%13))
	}
}

func BenchmarkPushMarkSentAck(b *testing.B) {
	for _, batch := range []int{1, 64} {
		b.Run(map[int]string{1: "each", 64: "batch64"}[batch], func(b *testing.B) {
			s := NewSender(DefaultConfig(), 0)
			p := make([]byte, 100)
			// Warm the rings up to their full size so the loop measures the
			// steady state.
			for s.HasCredit(len(p)) {
				s.Push(0, p)
			}
			s.MarkSent(s.NextSeq())
			s.Ack(s.NextSeq())
			b.SetBytes(int64(len(p)) * int64(batch))
			b.ReportAllocs()
			for b.Loop() {
				for range batch {
					if _, err := s.Push(1, p); err != nil {
						b.Fatal(err)
					}
				}
				s.MarkSent(s.NextSeq())
				s.Ack(s.NextSeq())
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/msg")
		})
	}
}

func BenchmarkMessage(b *testing.B) {
	s := NewSender(DefaultConfig(), 0)
	p := make([]byte, 100)
	for s.HasCredit(len(p)) {
		s.Push(0, p)
	}
	n := uint64(s.NextSeq())
	var seq uint64
	b.ReportAllocs()
	for b.Loop() {
		_, q := s.Message(seq)
		if len(q) != 100 {
			b.Fatal("bad message")
		}
		seq++
		if seq == n {
			seq = 0
		}
	}
}
