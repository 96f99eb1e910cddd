package lossdetect

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/window"
)

const (
	ms = int64(time.Millisecond)
	us = int64(time.Microsecond)
)

func testConfig() Config {
	return Config{MinAckTimeout: time.Millisecond, MaxAckTimeout: 64 * time.Millisecond, InitialAckTimeout: 4 * time.Millisecond}
}

// newTestTracker returns a tracker at epoch 7 over a window of 8 messages
// and 1000 bytes starting at seq 100, quiet after 100µs, with its OPEN not
// yet sent.
func newTestTracker(t *testing.T, isNew bool) (*Tracker, *window.Sender) {
	t.Helper()
	wc := window.DefaultConfig()
	wc.MaxMessages, wc.MaxBytes, wc.QuietAfter, wc.DrainEvery = 8, 1000, 100*time.Microsecond, 300*time.Microsecond
	return newTestTrackerWith(t, wc, isNew)
}

func newTestTrackerWith(t *testing.T, wc window.Config, isNew bool) (*Tracker, *window.Sender) {
	t.Helper()
	w := window.NewSender(wc, 100)
	tr := NewTracker(testConfig(), w, 7, isNew)
	return tr, w
}

// open sends the OPEN and applies its answer at time at.
func open(t *testing.T, tr *Tracker, at int64) {
	t.Helper()
	req, ok := tr.Tick(at)
	if !ok || !req.Open {
		t.Fatalf("Tick after NewTracker = %+v, %v; want an OPEN", req, ok)
	}
	out := tr.OnAck(at, Ack{Open: true, Epoch: tr.Epoch(), ReqSeq: req.Seq, Next: req.Seq})
	if out.Verdict != Accept || !out.Opened {
		t.Fatalf("Open ack: %+v", out)
	}
}

// sendN pushes and sends n messages at time now, returning the last request
// OnSent asked for.
func sendN(t *testing.T, tr *Tracker, w *window.Sender, now int64, n int) (last AckRequest, any bool) {
	t.Helper()
	for range n {
		if _, err := w.Push(now, []byte("0123456789")); err != nil {
			t.Fatal(err)
		}
		if req, ok := tr.OnSent(now, w.NextSeq()); ok {
			last, any = req, true
		}
	}
	return last, any
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name   string
		change func(*Config)
		errHas string
	}{
		{"the defaults are valid", func(*Config) {}, ""},
		{"a zero minimum timeout is rejected", func(c *Config) { c.MinAckTimeout = 0 }, "MinAckTimeout must be > 0"},
		{"a maximum below the minimum is rejected", func(c *Config) { c.MaxAckTimeout = time.Millisecond }, "MaxAckTimeout must be >= MinAckTimeout"},
		{"an initial timeout below the minimum is rejected", func(c *Config) { c.InitialAckTimeout = time.Millisecond }, "InitialAckTimeout must be in"},
		{"an initial timeout above the maximum is rejected", func(c *Config) { c.InitialAckTimeout = time.Hour }, "InitialAckTimeout must be in"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			tt.change(&c)
			err := c.Validate()
			if tt.errHas == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.errHas) || !strings.HasPrefix(err.Error(), "lossdetect: ") {
				t.Fatalf("Validate() = %v, want %q", err, tt.errHas)
			}
		})
	}
	if c := DefaultConfig(); c.MinAckTimeout != 2*time.Millisecond || c.MaxAckTimeout != time.Second || c.InitialAckTimeout != 20*time.Millisecond {
		t.Fatalf("DefaultConfig() = %+v", c)
	}
}

func TestNewTrackerPanicsOnInvalidConfig(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("no panic")
		}
	}()
	NewTracker(Config{}, window.NewSender(window.DefaultConfig(), 0), 1, true)
}

func TestOpening(t *testing.T) {
	t.Run("a brand-new channel may send at once, after its OPEN", func(t *testing.T) {
		tr, _ := newTestTracker(t, true)
		if !tr.CanSend() {
			t.Fatal("CanSend() = false for a new channel")
		}
		if d, ok := tr.NextDeadline(); !ok || d != math.MinInt64 {
			t.Fatalf("NextDeadline() = %d, %v; want MinInt64 (now)", d, ok)
		}
		req, ok := tr.Tick(5 * ms)
		if !ok || req != (AckRequest{Open: true, Epoch: 7, Seq: 100}) {
			t.Fatalf("Tick = %+v, %v", req, ok)
		}
		if d, ok := tr.NextDeadline(); !ok || d != 9*ms {
			t.Fatalf("NextDeadline() after the OPEN = %d, %v; want the initial timeout, 9ms", d, ok)
		}
	})
	t.Run("a re-opened channel waits for the Open ack", func(t *testing.T) {
		tr, w := newTestTracker(t, false)
		if tr.CanSend() {
			t.Fatal("CanSend() = true before the Open ack")
		}
		req, _ := tr.Tick(0)
		w.Push(0, []byte("x"))
		if r, ok := tr.OnSent(0, w.NextToSend()); ok {
			t.Fatalf("OnSent while waiting asked for %+v", r)
		}
		out := tr.OnAck(1*ms, Ack{Open: true, Epoch: 7, ReqSeq: req.Seq, Next: 100})
		if out.Verdict != Accept || !out.Opened || !tr.CanSend() {
			t.Fatalf("Open ack: %+v, CanSend %v", out, tr.CanSend())
		}
	})
	t.Run("a lost OPEN is repeated with a doubled timeout", func(t *testing.T) {
		tr, _ := newTestTracker(t, false)
		tr.Tick(0)
		if _, ok := tr.Tick(4*ms - 1); ok {
			t.Fatal("repeated before the timeout")
		}
		req, ok := tr.Tick(4 * ms)
		if !ok || !req.Open {
			t.Fatalf("Tick at the timeout = %+v, %v", req, ok)
		}
		if d, _ := tr.NextDeadline(); d != 12*ms {
			t.Fatalf("next deadline %v, want 12ms (doubled)", time.Duration(d))
		}
		if s := tr.Stats(); s.Opens != 1 || s.OpenRepeats != 1 {
			t.Fatalf("stats %+v", s)
		}
	})
}

func TestOnSentRequestsAfterAShareOfTheWindow(t *testing.T) {
	tr, w := newTestTracker(t, true)
	open(t, tr, 0)
	// The window is 8 messages, the share a quarter: every 2 messages.
	w.Push(0, []byte("a"))
	if _, ok := tr.OnSent(1, w.NextSeq()); ok {
		t.Fatal("asked after one message")
	}
	w.Push(0, []byte("b"))
	req, ok := tr.OnSent(2, w.NextSeq())
	if !ok || req != (AckRequest{Epoch: 7, Seq: 102}) {
		t.Fatalf("OnSent after two = %+v, %v", req, ok)
	}
	if out, ok := tr.Outstanding(); !ok || out.Seq != 102 {
		t.Fatalf("Outstanding() = %+v, %v", out, ok)
	}
	if _, ok := tr.OnSent(3, w.NextSeq()); ok {
		t.Fatal("asked again with nothing new sent")
	}
	if _, ok := tr.OnSent(3, w.NextSeq()+5); ok {
		t.Fatal("OnSent beyond what was pushed asked for a request")
	}
}

func TestOnDrainedRequestsTheTailOnceWhenNoneIsOutstanding(t *testing.T) {
	tr, w := newTestTracker(t, false) // quiet after 100µs, drain requests 300µs apart
	if _, ok := tr.OnDrained(0); ok {
		t.Fatal("OnDrained asked before the channel was open")
	}
	open(t, tr, 0)
	if _, ok := tr.OnDrained(1 * us); ok {
		t.Fatal("OnDrained asked with nothing sent")
	}
	w.Push(0, []byte("a"))
	if _, ok := tr.OnSent(2*us, w.NextSeq()); ok {
		t.Fatal("one message of eight asked by share")
	}
	req, ok := tr.OnDrained(3 * us)
	if !ok || req != (AckRequest{Epoch: 7, Seq: 101}) {
		t.Fatalf("OnDrained after one message = %+v, %v; want a request for 101", req, ok)
	}
	if _, ok := tr.OnDrained(4 * us); ok {
		t.Fatal("OnDrained asked again with a request outstanding")
	}
	w.Push(0, []byte("b"))
	tr.OnSent(5*us, w.NextSeq())
	if out := tr.OnAck(7*us, Ack{Epoch: 7, ReqSeq: 101, Count: 1, Next: 101}); out.Verdict != Accept {
		t.Fatalf("ack: %+v", out)
	}
	// The answer covered one message; the second is unacknowledged, but the
	// last request went out less than DrainEvery ago: the quiet timer will
	// ask.
	if _, ok := tr.OnDrained(8 * us); ok {
		t.Fatal("OnDrained asked twice within a quiet interval")
	}
	if d, ok := tr.NextDeadline(); !ok || d != 5*us+100*us {
		t.Fatalf("NextDeadline = %d, %v; want the quiet deadline %d", d, ok, 105*us)
	}
	if _, ok := tr.OnDrained(104 * us); ok {
		t.Fatal("OnDrained asked a quiet interval later, within DrainEvery")
	}
	if req, ok := tr.OnDrained(303 * us); !ok || req.Seq != 102 {
		t.Fatalf("OnDrained DrainEvery later = %+v, %v; want a request for 102", req, ok)
	}
	tr.OnAck(350*us, Ack{Epoch: 7, ReqSeq: 102, Count: 1, Next: 102})
	if _, ok := tr.OnDrained(400 * us); ok {
		t.Fatal("OnDrained asked with everything acknowledged")
	}
	tr.Reopen(500 * us)
	w.Push(0, []byte("c"))
	if _, ok := tr.OnDrained(900 * us); ok {
		t.Fatal("OnDrained asked while the channel re-opens")
	}
}

func TestOnAck(t *testing.T) {
	// Each case: a channel at epoch 7 from seq 100, opened, 6 messages sent
	// (requests at 102, 104, 106; 106 outstanding), then the ack.
	tests := []struct {
		name        string
		before      func(tr *Tracker, w *window.Sender)
		ack         Ack
		want        Outcome
		wantAcked   uint64
		wantCursor  uint64
		outstanding bool
	}{
		{"an ack of everything frees it and answers the request",
			nil, Ack{Epoch: 7, ReqSeq: 106, Count: 6, Next: 106},
			Outcome{Verdict: Accept, Freed: 6}, 106, 106, false},
		{"an ack of an older request frees credit and keeps the request outstanding",
			nil, Ack{Epoch: 7, ReqSeq: 102, Count: 2, Next: 102},
			Outcome{Verdict: Accept, Freed: 2}, 102, 106, true},
		{"an ack of an older request reporting loss does not rewind",
			nil, Ack{Epoch: 7, ReqSeq: 104, Count: 1, Next: 101},
			Outcome{Verdict: Accept, Freed: 1}, 101, 106, true},
		{"an ack below the request's seq reports loss and rewinds",
			nil, Ack{Epoch: 7, ReqSeq: 106, Count: 3, Next: 103},
			Outcome{Verdict: Accept, Freed: 3, Lost: true, ResendFrom: 103, Resend: 3}, 103, 103, false},
		{"an ack reporting loss of everything rewinds to the start",
			nil, Ack{Epoch: 7, ReqSeq: 106, Count: 0, Next: 100},
			Outcome{Verdict: Accept, Lost: true, ResendFrom: 100, Resend: 6}, 100, 100, false},
		{"an ack of another epoch is stale",
			nil, Ack{Epoch: 6, ReqSeq: 106, Count: 6, Next: 106},
			Outcome{Verdict: Stale}, 100, 106, true},
		{"an ack for seqs never sent is invalid",
			nil, Ack{Epoch: 7, ReqSeq: 106, Count: 7, Next: 107},
			Outcome{Verdict: Invalid}, 100, 106, true},
		{"an ack answering a request never sent is invalid",
			nil, Ack{Epoch: 7, ReqSeq: 1000, Count: 0, Next: 100},
			Outcome{Verdict: Invalid}, 100, 106, true},
		{"an ack of huge values is invalid",
			nil, Ack{Epoch: 7, ReqSeq: math.MaxUint64, Count: math.MaxUint64, Next: math.MaxUint64},
			Outcome{Verdict: Invalid}, 100, 106, true},
		{"an ack below what is already acked is a duplicate",
			func(tr *Tracker, w *window.Sender) { tr.OnAck(1*ms, Ack{Epoch: 7, ReqSeq: 104, Count: 4, Next: 104}) },
			Ack{Epoch: 7, ReqSeq: 102, Count: 2, Next: 102},
			Outcome{Verdict: Duplicate}, 104, 106, true},
		{"an ack equal to what is acked, for an old request, is a duplicate",
			func(tr *Tracker, w *window.Sender) { tr.OnAck(1*ms, Ack{Epoch: 7, ReqSeq: 104, Count: 4, Next: 104}) },
			Ack{Epoch: 7, ReqSeq: 104, Count: 0, Next: 104},
			Outcome{Verdict: Duplicate}, 104, 106, true},
		{"a copy of an applied ack does not rewind twice",
			func(tr *Tracker, w *window.Sender) {
				tr.OnAck(1*ms, Ack{Epoch: 7, ReqSeq: 106, Count: 2, Next: 102})
				w.MarkSent(106)
				tr.OnSent(1*ms, 106) // the resend: a new request for 106 goes out
				if _, ok := tr.Outstanding(); !ok {
					tr.Tick(2 * ms) // quiet request
				}
			},
			Ack{Epoch: 7, ReqSeq: 106, Count: 2, Next: 102},
			Outcome{Verdict: Duplicate}, 102, 106, true},
		{"a second answer with nothing new still rewinds once the request was repeated",
			func(tr *Tracker, w *window.Sender) {
				tr.OnAck(1*ms, Ack{Epoch: 7, ReqSeq: 106, Count: 2, Next: 102})
				tr.OnSent(1*ms, 106)
				if d, _ := tr.NextDeadline(); d > 3*ms {
					panic("the repeat would come after the ack")
				} else if req, ok := tr.Tick(d); !ok || req.Seq != 106 {
					panic("no repeat of the request for 106")
				}
			},
			Ack{Epoch: 7, ReqSeq: 106, Count: 0, Next: 102},
			Outcome{Verdict: Accept, Lost: true, ResendFrom: 102, Resend: 4}, 102, 102, false},
		{"an Open ack after Reopen rewinds to its next and resumes",
			func(tr *Tracker, w *window.Sender) { tr.Reopen(1 * ms); tr.Tick(2 * ms) },
			Ack{Open: true, Epoch: 7, ReqSeq: 100, Count: 4, Next: 104},
			Outcome{Verdict: Accept, Freed: 4, Lost: true, ResendFrom: 104, Resend: 2, Opened: true}, 104, 104, false},
		{"an Open ack whose next is below its firstSeq is invalid",
			func(tr *Tracker, w *window.Sender) {
				tr.OnAck(1*ms, Ack{Epoch: 7, ReqSeq: 106, Count: 3, Next: 103})
				tr.Reopen(1 * ms)
				tr.Tick(2 * ms)
			},
			Ack{Open: true, Epoch: 7, ReqSeq: 103, Count: 0, Next: 101},
			Outcome{Verdict: Invalid}, 103, 103, false},
		{"a normal ack while re-opening frees credit but does not resume",
			func(tr *Tracker, w *window.Sender) { tr.Reopen(1 * ms); tr.Tick(2 * ms) },
			Ack{Epoch: 7, ReqSeq: 106, Count: 2, Next: 102},
			Outcome{Verdict: Accept, Freed: 2}, 102, 106, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tr, w := newTestTracker(t, true)
			open(t, tr, 0)
			sendN(t, tr, w, 0, 6)
			if tt.before != nil {
				tt.before(tr, w)
			}
			got := tr.OnAck(3*ms, tt.ack)
			if got != tt.want {
				t.Fatalf("OnAck(%+v) = %+v, want %+v", tt.ack, got, tt.want)
			}
			if w.Acked() != tt.wantAcked || w.NextToSend() != tt.wantCursor {
				t.Errorf("window acked %d cursor %d, want %d %d", w.Acked(), w.NextToSend(), tt.wantAcked, tt.wantCursor)
			}
			if _, ok := tr.Outstanding(); ok != tt.outstanding {
				t.Errorf("outstanding = %v, want %v", ok, tt.outstanding)
			}
		})
	}
}

func TestOnAckCountsAnomalies(t *testing.T) {
	tr, w := newTestTracker(t, true)
	open(t, tr, 0)
	sendN(t, tr, w, 0, 6)
	tr.OnAck(1*ms, Ack{Epoch: 7, ReqSeq: 106, Count: 9, Next: 106}) // claims 9 over 6 seqs
	sendN(t, tr, w, 2*ms, 2)
	tr.OnAck(3*ms, Ack{Epoch: 7, ReqSeq: 108, Count: 1, Next: 108}) // 1 over 2 seqs
	tr.OnAck(3*ms, Ack{Epoch: 1, ReqSeq: 108, Count: 1, Next: 108})
	tr.OnAck(3*ms, Ack{Epoch: 7, ReqSeq: 108, Count: 1, Next: 109})
	s := tr.Stats()
	if s.CountMismatches != 2 || s.CountExcess != 1 || s.StaleAcks != 1 || s.InvalidAcks != 1 || s.Acks != 5 {
		t.Fatalf("stats %+v", s)
	}
}

func TestTickRequestsAndRepeats(t *testing.T) {
	tr, w := newTestTracker(t, true)
	open(t, tr, 0)
	if _, ok := tr.NextDeadline(); ok {
		t.Fatal("a deadline with nothing unacknowledged")
	}
	w.Push(0, []byte("a"))
	if _, ok := tr.OnSent(10*us, 101); ok {
		t.Fatal("one message of 8 asked for a request")
	}
	// Quiet channel: a request after QuietAfter (100µs).
	if d, ok := tr.NextDeadline(); !ok || d != 110*us {
		t.Fatalf("quiet deadline %d, %v; want 110µs", d, ok)
	}
	if _, ok := tr.Tick(109 * us); ok {
		t.Fatal("request before the channel was quiet")
	}
	req, ok := tr.Tick(110 * us)
	if !ok || req != (AckRequest{Epoch: 7, Seq: 101}) {
		t.Fatalf("quiet Tick = %+v, %v", req, ok)
	}
	// Unanswered: repeated after the RTO (1ms: the Open ack came back at
	// once, and the minimum applies), doubling, capped at 64ms.
	at := 110 * us
	for i, wait := range []int64{1 * ms, 2 * ms, 4 * ms, 8 * ms, 16 * ms, 32 * ms, 64 * ms, 64 * ms} {
		if d, _ := tr.NextDeadline(); d != at+wait {
			t.Fatalf("repeat %d: deadline %v, want %v", i, time.Duration(d-at), time.Duration(wait))
		}
		at += wait
		req, ok := tr.Tick(at)
		if !ok || req.Seq != 101 || req.Open {
			t.Fatalf("repeat %d: %+v, %v", i, req, ok)
		}
	}
	if s := tr.Stats(); s.Requests != 1 || s.Repeats != 8 || s.RTTSamples != 1 {
		t.Fatalf("stats %+v", s)
	}
	// The answer to a repeated request is no round-trip sample (Karn).
	tr.OnAck(at+ms, Ack{Epoch: 7, ReqSeq: 101, Count: 1, Next: 101})
	if s := tr.Stats(); s.RTTSamples != 1 || s.RTO != time.Millisecond {
		t.Fatalf("after the answer to a repeat: %+v", s)
	}
	if _, ok := tr.NextDeadline(); ok {
		t.Fatal("a deadline with everything acknowledged")
	}
}

func TestRoundTripEstimate(t *testing.T) {
	tr, w := newTestTracker(t, true)
	open(t, tr, 0) // an Open ack answered at once: a 0 sample, RTO clamped to the 1ms minimum
	if s := tr.Stats(); s.RTTSamples != 1 || s.RTO != time.Millisecond {
		t.Fatalf("after a zero sample: %+v", s)
	}
	now := int64(0)
	for range 40 {
		req, ok := sendN(t, tr, w, now, 2)
		if !ok {
			t.Fatal("no request after 2 messages")
		}
		now += 10 * ms
		tr.OnAck(now, Ack{Epoch: 7, ReqSeq: req.Seq, Count: 2, Next: req.Seq})
	}
	s := tr.Stats()
	// srtt converges to 10ms from below; rttvar decays; RTO = srtt + 4*rttvar.
	if s.SRTT < 9900*time.Microsecond || s.RTTVar > 100*time.Microsecond || s.SRTT > 10*time.Millisecond || s.RTO != s.SRTT+4*s.RTTVar {
		t.Fatalf("estimate after steady 10ms round trips: %+v", s)
	}
	// A huge sample is clamped to MaxAckTimeout.
	req, _ := sendN(t, tr, w, now, 2)
	now += int64(time.Hour)
	tr.OnAck(now, Ack{Epoch: 7, ReqSeq: req.Seq, Count: 2, Next: req.Seq})
	if s := tr.Stats(); s.RTO != 64*time.Millisecond {
		t.Fatalf("RTO after a 1h sample = %v, want the 64ms maximum", s.RTO)
	}
}

func TestReopenForgetsTheOutstandingRequest(t *testing.T) {
	tr, w := newTestTracker(t, true)
	open(t, tr, 0)
	sendN(t, tr, w, 0, 2)
	tr.Reopen(ms)
	if _, ok := tr.Outstanding(); ok || tr.CanSend() {
		t.Fatal("after Reopen: a request still outstanding or sending allowed")
	}
	if d, ok := tr.NextDeadline(); !ok || d != math.MinInt64 {
		t.Fatalf("NextDeadline after Reopen = %d, %v; want an OPEN now", d, ok)
	}
	req, ok := tr.Tick(2 * ms)
	if !ok || req != (AckRequest{Open: true, Epoch: 7, Seq: 100}) {
		t.Fatalf("Tick after Reopen = %+v, %v", req, ok)
	}
	// While waiting, only the OPEN's timer runs: no quiet request.
	if req, ok := tr.Tick(2*ms + 500*us); ok {
		t.Fatalf("Tick while waiting = %+v", req)
	}
	if s := tr.Stats(); s.Reopens != 1 || s.Opens != 2 {
		t.Fatalf("stats %+v", s)
	}
}

// BenchmarkTrackerCycle measures the source side per message: Push,
// OnSent (with a request every quarter window) and an ack per request, on
// 100-byte payloads.
func BenchmarkTrackerCycle(b *testing.B) {
	w := window.NewSender(window.DefaultConfig(), 0)
	tr := NewTracker(DefaultConfig(), w, 1, true)
	req, _ := tr.Tick(0)
	tr.OnAck(0, Ack{Open: true, Epoch: 1, ReqSeq: req.Seq, Next: req.Seq})
	p := make([]byte, 100)
	now := int64(0)
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		now += 100
		seq, err := w.Push(now, p)
		if err != nil {
			b.Fatal(err)
		}
		if req, ok := tr.OnSent(now, seq+1); ok {
			tr.OnAck(now, Ack{Epoch: 1, ReqSeq: req.Seq, Count: req.Seq - w.Acked(), Next: req.Seq})
		}
	}
}

// BenchmarkRoundTrip measures both sides per message: the source's Push and
// OnSent, the receiver's OnData and Consumed, and the request/answer/ack
// exchange every quarter window.
func BenchmarkRoundTrip(b *testing.B) {
	w := window.NewSender(window.DefaultConfig(), 0)
	tr := NewTracker(DefaultConfig(), w, 1, true)
	r := NewReceiver()
	req, _ := tr.Tick(0)
	r.OnOpen(req.Epoch, req.Seq)
	a, _ := r.Answer()
	tr.OnAck(0, a)
	p := make([]byte, 100)
	now := int64(0)
	b.SetBytes(int64(len(p)))
	b.ReportAllocs()
	for b.Loop() {
		now += 100
		seq, err := w.Push(now, p)
		if err != nil {
			b.Fatal(err)
		}
		if r.OnData(1, seq) != Accept {
			b.Fatal("not accepted")
		}
		r.Consumed(seq + 1)
		if req, ok := tr.OnSent(now, seq+1); ok {
			r.OnAckRequest(req.Epoch, req.Seq)
			a, _ := r.Answer()
			if out := tr.OnAck(now, a); out.Verdict != Accept || out.Lost {
				b.Fatalf("ack %+v: %+v", a, out)
			}
		}
	}
}

// Without DrainEvery, drain-time requests are spaced by QuietAfter.
func TestOnDrainedIsSpacedByQuietAfterWithoutDrainEvery(t *testing.T) {
	wc := window.DefaultConfig()
	wc.MaxMessages, wc.MaxBytes, wc.QuietAfter, wc.DrainEvery = 8, 1000, 100*time.Microsecond, 0
	tr, w := newTestTrackerWith(t, wc, false)
	open(t, tr, 0)
	w.Push(0, []byte("a"))
	tr.OnSent(10*us, w.NextSeq())
	req, ok := tr.OnDrained(10 * us)
	if !ok || req.Seq != 101 {
		t.Fatalf("first drain: %+v, %v; want a request for 101", req, ok)
	}
	tr.OnAck(11*us, Ack{Epoch: 7, ReqSeq: 101, Count: 1, Next: 101})
	w.Push(0, []byte("b"))
	tr.OnSent(50*us, w.NextSeq())
	if _, ok := tr.OnDrained(50 * us); ok {
		t.Fatal("asked again 40µs after the last request, within QuietAfter")
	}
	if req, ok := tr.OnDrained(110 * us); !ok || req.Seq != 102 {
		t.Fatalf("drain a QuietAfter later: %+v, %v; want a request for 102 (not DrainEvery's default 2ms)", req, ok)
	}
}

// TestAnAnswerWithNothingNewIsNotTakenTwice: the last two messages of a
// burst are lost (and with them, when two arrived before them, the request
// between), so the answer to the burst's last request reports the loss,
// counting what arrived, and the source re-sends. A copy of that answer,
// made by the link, or a second answer of the target's to a duplicate of
// the request (which counts nothing), arriving before the re-sent
// messages, reports again a loss the source has already acted on: it must
// neither rewind a second time (re-sending what is still on its way), nor
// answer the request that went out with the re-sent messages, nor count as
// a round trip. The answer still counts when the re-sent messages were
// lost too: a timeout later, the answer to the repeated request rewinds.
func TestAnAnswerWithNothingNewIsNotTakenTwice(t *testing.T) {
	for _, arrived := range []int{0, 2} {
		for _, copied := range []string{"ack", "request"} {
			t.Run(fmt.Sprintf("%d arrived, the link duplicates the %s", arrived, copied), func(t *testing.T) {
				tr, w := newTestTracker(t, true)
				r := NewReceiver()
				openReq, _ := tr.Tick(0)
				r.OnOpen(openReq.Epoch, openReq.Seq)
				openAck, _ := r.Answer()
				tr.OnAck(0, openAck)
				lost := uint64(100 + arrived) // the first message lost
				end := lost + 2
				req, ok := sendN(t, tr, w, 0, arrived+2)
				if !ok || req.Seq != end {
					t.Fatalf("request %+v, %v; want one for %d", req, ok, end)
				}
				if arrived > 0 {
					for seq := uint64(100); seq < lost; seq++ {
						r.OnData(7, seq)
					}
					r.Consumed(lost)
				}
				r.OnAckRequest(req.Epoch, req.Seq)
				lossAck, _ := r.Answer()
				if want := (Ack{Epoch: 7, ReqSeq: end, Count: uint64(arrived), Next: lost}); lossAck != want {
					t.Fatalf("answer %+v, want the loss report %+v", lossAck, want)
				}
				if out := tr.OnAck(1*ms, lossAck); !out.Lost || out.ResendFrom != lost || out.Resend != 2 {
					t.Fatalf("the loss report: %+v, want a rewind to %d", out, lost)
				}
				resent, ok := tr.OnSent(1*ms, w.NextSeq()) // the two again, then a request
				if !ok || resent.Seq != end {
					t.Fatalf("re-sent two messages, request %+v, %v; want one for %d", resent, ok, end)
				}
				copyAck := lossAck
				if copied == "request" {
					r.OnAckRequest(req.Epoch, req.Seq)
					copyAck, _ = r.Answer()
				}
				samples := tr.Stats().RTTSamples
				out := tr.OnAck(1*ms+10*us, copyAck)
				if out.Verdict != Duplicate || out.Lost || w.NextToSend() != end {
					t.Fatalf("the copy %+v: %+v, cursor %d; want a duplicate and the cursor left at %d", copyAck, out, w.NextToSend(), end)
				}
				if _, ok := tr.Outstanding(); !ok {
					t.Fatal("the copy answered the request sent with the re-sent messages")
				}
				if s := tr.Stats(); s.RTTSamples != samples {
					t.Fatalf("the copy was taken as a round trip: %d samples, want %d", s.RTTSamples, samples)
				}
				// The re-sent messages were lost too: the request is
				// repeated, and its answer, the same report again, rewinds.
				d, _ := tr.NextDeadline()
				if rep, ok := tr.Tick(d); !ok || rep.Seq != end || rep.Open {
					t.Fatalf("Tick at the timeout = %+v, %v; want the request for %d again", rep, ok, end)
				}
				r.OnAckRequest(7, end)
				again, _ := r.Answer()
				if out := tr.OnAck(d+10*us, again); !out.Lost || out.ResendFrom != lost || out.Resend != 2 {
					t.Fatalf("the answer %+v to the repeated request: %+v, want a rewind to %d", again, out, lost)
				}
			})
		}
	}
}
