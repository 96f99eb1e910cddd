package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/cmd/loadgen/internal/control"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport"
)

// hostileSnapshot is a latency snapshot whose geometry makes
// hdrhistogram.Import panic.
func hostileSnapshot() *hdrhistogram.Snapshot {
	return &hdrhistogram.Snapshot{LowestTrackableValue: 1 << 62, HighestTrackableValue: 1<<63 - 1, SignificantFigures: 3, Counts: []int64{1}}
}

func TestImportLatencyTakesOnlyWhatARecorderExports(t *testing.T) {
	rec := bench.NewRecorder()
	rec.RecordN(1500, 3)
	good := rec.Snapshot().Export()
	h, err := importLatency(good)
	if err != nil {
		t.Fatalf("a Recorder's own snapshot is refused: %v", err)
	}
	if h.TotalCount() != 3 || h.Max() < 1500 {
		t.Errorf("imported %d values up to %d, want the 3 of 1500 ns recorded", h.TotalCount(), h.Max())
	}
	change := func(f func(s *hdrhistogram.Snapshot)) *hdrhistogram.Snapshot {
		s := *good
		s.Counts = append([]int64(nil), good.Counts...)
		f(&s)
		return &s
	}
	for _, tt := range []struct {
		name string
		snap *hdrhistogram.Snapshot
		want string
	}{
		{"a lowest value that makes Import panic", hostileSnapshot(), "values 4611686018427387904 to"},
		{"another highest value", change(func(s *hdrhistogram.Snapshot) { s.HighestTrackableValue = 1 << 40 }), "where loadgen's are 1 to 60000000000 ns at 3"},
		{"another precision", change(func(s *hdrhistogram.Snapshot) { s.SignificantFigures = 5 }), "at 5 significant figures"},
		{"counts missing", change(func(s *hdrhistogram.Snapshot) { s.Counts = s.Counts[:10] }), "10 counts"},
		{"a negative count", change(func(s *hdrhistogram.Snapshot) { s.Counts[7] = -1 }), "count 7 is negative"},
		{"counts that overflow", change(func(s *hdrhistogram.Snapshot) { s.Counts[1], s.Counts[2] = 1<<62, 1<<62 }), "add up to more than"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := importLatency(tt.snap)
			if !errors.Is(err, errBadLatency) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want errBadLatency saying %q", err, tt.want)
			}
		})
	}
}

// fakeReceiver is an agent that plays the receiver of a fan-in run by the
// protocol and answers collect with the findings findings makes of the
// epochs asked for.
func fakeReceiver(t *testing.T, findings func(epochs []uint64) *control.Findings) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	node, err := transport.NewNode(transport.WithListen("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Abort)
	node.HandleAllInline(func(taskid.ID) transport.Handler {
		return func(taskid.Channel, uint64, []transport.Message) {}
	})
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		cc := control.NewConn(c)
		defer cc.Close()
		for {
			m, err := cc.Recv(10 * time.Second)
			if err != nil {
				return
			}
			var answer control.Msg
			switch m.Kind {
			case control.KindPlan:
				answer = control.Msg{Kind: control.KindReady, Ready: &control.Ready{DataAddr: node.Addr(), Epoch: node.Epoch()}}
			case control.KindConnect:
				answer = control.Msg{Kind: control.KindConnected}
			case control.KindStart:
				continue
			case control.KindCollect:
				answer = control.Msg{Kind: control.KindFindings, Findings: findings(m.Epochs)}
			default:
				answer = control.Msg{Kind: control.KindBye}
			}
			if cc.Send(answer) != nil {
				return
			}
		}
	}()
	return ln.Addr().String()
}

// A receiver whose findings carry a latency histogram hdrhistogram cannot
// import fails the run naming that agent, instead of killing coordinate.
func TestCoordinateRefusesAnAgentsUnusableLatencies(t *testing.T) {
	rx := fakeReceiver(t, func(epochs []uint64) *control.Findings {
		f := &control.Findings{BySender: map[uint64]control.Received{}}
		for _, e := range epochs {
			f.BySender[e] = control.Received{Delivered: 1000, Latency: hostileSnapshot()}
		}
		return f
	})
	tx := startAgent(t)
	cfg := testCoordConfig(rx, tx.addr)
	cfg.messages = 1000
	cfg.trustClocks = true
	_, _, err := coordinate(context.Background(), cfg, io.Discard)
	var ae *agentError
	if !errors.Is(err, errAgentBadReport) || !errors.Is(err, errBadLatency) || !errors.As(err, &ae) || ae.Agent != rx || ae.Phase != "collecting" {
		t.Fatalf("error %v; want one naming agent %s, while collecting, for the latencies it sent", err, rx)
	}
	if !strings.Contains(err.Error(), tx.addr) {
		t.Errorf("error %q does not say whose latencies they were (sender %s)", err, tx.addr)
	}
}

// The merged report says how many malformed payloads a receiver counted
// from each sender.
func TestCoordinateReportsMalformedPayloads(t *testing.T) {
	rec := bench.NewRecorder()
	rec.RecordN(20_000, 1000)
	rx := fakeReceiver(t, func(epochs []uint64) *control.Findings {
		f := &control.Findings{BySender: map[uint64]control.Received{}}
		for _, e := range epochs {
			f.BySender[e] = control.Received{Delivered: 1000, Malformed: 4, Latency: rec.Snapshot().Export()}
		}
		return f
	})
	tx := startAgent(t)
	cfg := testCoordConfig(rx, tx.addr)
	cfg.messages = 1000
	cfg.trustClocks = true
	r, _, err := coordinate(context.Background(), cfg, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	want := tx.addr + " -> " + rx + ": 4 messages arrived with payloads shorter than the 16-byte header"
	if notes := strings.Join(r.Notes, "\n"); !strings.Contains(notes, want) {
		t.Errorf("the report's notes do not say %q:\n%s", want, notes)
	}
}

// fakeServe is a 'loadgen serve' that takes everything and answers a
// report request with answer.
func fakeServe(t *testing.T, answer control.Received) string {
	t.Helper()
	node, err := transport.NewNode(transport.WithListen("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(node.Abort)
	node.HandleAll(func(target taskid.ID) transport.Handler {
		if target != controlTarget {
			return func(taskid.Channel, uint64, []transport.Message) {}
		}
		return func(_ taskid.Channel, _ uint64, msgs []transport.Message) {
			for _, m := range msgs {
				var req reportRequest
				if json.Unmarshal(m.Payload, &req) != nil {
					continue
				}
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					p, err := node.Peer(req.ReplyTo)
					if err != nil {
						return
					}
					s, err := p.OpenSenderEpoch(ctx, replySource, replyTarget, req.Epoch)
					if err != nil {
						return
					}
					b, _ := json.Marshal(answer)
					_ = s.Send(ctx, 0, b)
					_ = s.Flush(ctx)
				}()
			}
		}
	})
	return node.Addr()
}

// send refuses findings whose latency histogram hdrhistogram cannot import,
// saying whose they were, instead of dying.
func TestSendRefusesServesUnusableLatencies(t *testing.T) {
	to := fakeServe(t, control.Received{Delivered: 100, Latency: hostileSnapshot()})
	err := run(context.Background(), []string{"send", "--to", to, "--messages", "100", "--clock-correction=false", "--out", t.TempDir()}, io.Discard, io.Discard)
	if !errors.Is(err, errBadLatency) || !strings.Contains(err.Error(), "'loadgen serve' at "+to) {
		t.Fatalf("error %v; want one saying the latencies serve at %s reported are unusable", err, to)
	}
}

// bench refuses a side's latencies it cannot import, instead of dying.
func TestBenchRefusesASidesUnusableLatencies(t *testing.T) {
	err := latencyFigures(map[string]float64{}, hostileSnapshot())
	if !errors.Is(err, errBadLatency) || !strings.Contains(err.Error(), "the receiver's latencies") {
		t.Fatalf("error %v, want one saying the receiver's latencies are unusable", err)
	}
}
