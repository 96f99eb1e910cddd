// Package expfmttest checks Sluice's Prometheus exporter (package metrics)
// against Prometheus's own text parser. It is a module of its own so that
// the library does not depend on prometheus/common.
package expfmttest

import (
	"bytes"
	"context"
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport"
)

// TestPrometheusReadsWhatTheExporterServes runs traffic between two nodes
// with loss and resets, serves the sender's and receiver's metrics on a
// real HTTP server, fetches them with a real client, and parses them with
// Prometheus's text parser: it accepts them, and reads the same families,
// types, labels and values as package metrics' own parser.
func TestPrometheusReadsWhatTheExporterServes(t *testing.T) {
	rx, err := transport.NewNode(transport.WithListen("127.0.0.1:0"))
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Abort()
	var got atomic.Int64
	rx.HandleAll(func(taskid.ID) transport.Handler {
		return func(_ taskid.Channel, _ uint64, msgs []transport.Message) { got.Add(int64(len(msgs))) }
	})
	tx, err := transport.NewNode(transport.WithFaults(transport.Faults{Drop: 0.05, Reset: 20 * time.Millisecond, Seed: 4}),
		transport.WithReconnectBackoff(time.Millisecond, 5*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Abort()
	p, err := tx.Peer(rx.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var senders []*transport.Sender
	for i := range 4 {
		s, err := p.OpenSender(ctx, taskid.ID{Index: uint32(i)}, taskid.ID{Processor: 1, Index: uint32(i % 2)})
		if err != nil {
			t.Fatal(err)
		}
		senders = append(senders, s)
	}
	// Rounds of 5,000 messages a channel until a reset has happened.
	var total int64
	for tx.Stats().Faults.Resets == 0 || total == 0 {
		for _, s := range senders {
			for k := range 5000 {
				if err := s.Send(ctx, int64(k), make([]byte, 100)); err != nil {
					t.Fatal(err)
				}
			}
			total += 5000
		}
	}
	for _, s := range senders {
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if f := tx.Stats().Faults; f.DataDropped == 0 || f.Resets == 0 {
		t.Fatalf("faults %+v: want drops and resets", f)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler(
		metrics.NodeCollector(tx, metrics.NodeOptions{Channels: true, Name: "tx"}),
		metrics.NodeCollector(rx, metrics.NodeOptions{Name: "rx"})))
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	if ct := expfmt.ResponseFormat(resp.Header); ct.FormatType() != expfmt.TypeTextPlain {
		t.Errorf("Content-Type %q is read as %v, want the text format", resp.Header.Get("Content-Type"), ct)
	}

	parser := expfmt.NewTextParser(model.LegacyValidation)
	prom, err := parser.TextToMetricFamilies(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("Prometheus's parser refuses the exposition: %v\n%s", err, body)
	}
	ours, err := metrics.Parse(bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if len(prom) != len(ours) || len(ours) < 30 {
		t.Errorf("Prometheus read %d families, package metrics %d (want the same, at least 30)", len(prom), len(ours))
	}
	for _, f := range ours {
		pf, ok := prom[f.Name]
		if !ok {
			t.Errorf("Prometheus did not read family %s", f.Name)
			continue
		}
		if pf.GetHelp() != f.Help || !sameType(pf.GetType(), f.Type) || len(pf.GetMetric()) != len(f.Samples) {
			t.Errorf("%s: Prometheus read help %q, type %v, %d samples; we wrote %q, %v, %d",
				f.Name, pf.GetHelp(), pf.GetType(), len(pf.GetMetric()), f.Help, f.Type, len(f.Samples))
			continue
		}
		for i, s := range f.Samples {
			m := pf.GetMetric()[i]
			if v := valueOf(m); v != s.Value && !(math.IsNaN(v) && math.IsNaN(s.Value)) {
				t.Errorf("%s sample %d: Prometheus read %v, we wrote %v", f.Name, i, v, s.Value)
			}
			if len(m.GetLabel()) != len(s.Labels) {
				t.Errorf("%s sample %d: Prometheus read labels %v, we wrote %v", f.Name, i, m.GetLabel(), s.Labels)
				continue
			}
			// Prometheus sorts a sample's labels by name.
			for _, l := range m.GetLabel() {
				if s.Label(l.GetName()) != l.GetValue() {
					t.Errorf("%s sample %d: label %s=%q, we wrote %q", f.Name, i, l.GetName(), l.GetValue(), s.Label(l.GetName()))
				}
			}
		}
	}
	// And the values are the node's: the reconnects after the injected
	// resets, the messages every channel sent.
	peer := prom["sluice_peer_reconnects_total"]
	if peer == nil || len(peer.GetMetric()) != 1 || peer.GetMetric()[0].GetCounter().GetValue() < 1 {
		t.Errorf("sluice_peer_reconnects_total: %v, want one peer with at least one reconnect", peer)
	}
	var sent float64
	for _, m := range prom["sluice_channel_sent_messages_total"].GetMetric() {
		sent += m.GetCounter().GetValue()
	}
	if sent != float64(total) || got.Load() != total {
		t.Errorf("channels sent %v, receiver got %d; want %d", sent, got.Load(), total)
	}
	if !strings.Contains(string(body), `sluice_peer_blocked_seconds_total{node="tx",peer="`+rx.Addr()+`"}`) {
		t.Errorf("no back-pressure series for peer %s", rx.Addr())
	}
}

func sameType(t dto.MetricType, ours metrics.Type) bool {
	switch ours {
	case metrics.Counter:
		return t == dto.MetricType_COUNTER
	case metrics.Gauge:
		return t == dto.MetricType_GAUGE
	}
	return t == dto.MetricType_UNTYPED
}

func valueOf(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	}
	return m.GetUntyped().GetValue()
}
