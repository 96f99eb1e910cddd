package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/transport"
)

// hub is what --metrics serves: the nodes and coordinators this process
// runs add themselves while they live.
type hub struct {
	mu   sync.Mutex
	next int
	cs   map[int]metrics.Collector
}

var metricsHub = &hub{cs: map[int]metrics.Collector{}}

// add serves c until the returned function is called.
func (h *hub) add(c metrics.Collector) (remove func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	id := h.next
	h.next++
	h.cs[id] = c
	return func() {
		h.mu.Lock()
		delete(h.cs, id)
		h.mu.Unlock()
	}
}

// addNode serves a transport node's counters, labelled node=name.
func (h *hub) addNode(n *transport.Node, name string) (remove func()) {
	return h.add(metrics.NodeCollector(n, metrics.NodeOptions{Name: name}))
}

func (h *hub) Collect(s *metrics.Set) {
	h.mu.Lock()
	ids := make([]int, 0, len(h.cs))
	for id := range h.cs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	cs := make([]metrics.Collector, len(ids))
	for i, id := range ids {
		cs[i] = h.cs[id]
	}
	h.mu.Unlock()
	for _, c := range cs {
		c.Collect(s)
	}
}

// serveMetrics serves /metrics (the Prometheus text format) and
// /debug/pprof/ on addr until ctx ends. It returns the address it listens
// on (addr may name port 0).
func serveMetrics(ctx context.Context, addr string, stderr io.Writer) (string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("--metrics: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler(metricsHub))
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	context.AfterFunc(ctx, func() { _ = srv.Close() })
	fmt.Fprintf(stderr, "loadgen: metrics at http://%s/metrics, profiles at http://%s/debug/pprof/\n", ln.Addr(), ln.Addr())
	return ln.Addr().String(), nil
}

// startMetrics serves --metrics, if given, for as long as ctx lives.
func (s *nodeFlags) startMetrics(ctx context.Context, stderr io.Writer) error {
	if s.metrics == "" {
		return nil
	}
	_, err := serveMetrics(ctx, s.metrics, stderr)
	return err
}

func statCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("stat", "Shows a live table of a running node's counters, read from the endpoint its\n"+
		"--metrics flag serves (like AeronStat): per peer the messages and bytes per second, re-sends, the\n"+
		"time senders spent blocked on credit (ms per second), unacknowledged and unsent messages, RTT and\n"+
		"reconnects, the peer's clock offset (± its error) and whether it is a slow consumer; per node the drops,\n"+
		"injected faults, refusals and alerts; and the engine's clock and checkpoints.", stderr)
	node := fs.String("node", "127.0.0.1:9100", "host:port of the node's --metrics endpoint")
	interval := fs.Duration("interval", time.Second, "time between refreshes")
	count := fs.Int("count", 0, "refresh this many times, then exit (0: until interrupted)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("stat: unexpected arguments %q", fs.Args())
	}
	if *interval <= 0 {
		return errors.New("stat: --interval must be positive")
	}
	if *count < 0 {
		return fmt.Errorf("stat: --count must not be negative (0: until interrupted), got %d", *count)
	}
	url := *node
	if !strings.Contains(url, "://") {
		url = "http://" + url
	}
	if !strings.HasSuffix(url, "/metrics") {
		url = strings.TrimSuffix(url, "/") + "/metrics"
	}
	client := &http.Client{Timeout: 10 * time.Second}
	clear := isTerminal(stdout)
	var prev *snapshot
	t := time.NewTicker(*interval)
	defer t.Stop()
	for i := 0; *count == 0 || i < *count; i++ {
		if i > 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
			}
		}
		cur, err := fetchSnapshot(ctx, client, url, maxMetricsBody)
		if err != nil {
			return fmt.Errorf("stat: %w", err)
		}
		var b strings.Builder
		if clear {
			b.WriteString("\033[H\033[2J")
		} else if i > 0 {
			b.WriteByte('\n')
		}
		cur.render(&b, prev, *node)
		if _, err := io.WriteString(stdout, b.String()); err != nil {
			return err
		}
		prev = cur
	}
	return nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// snapshot is one scrape, indexed by family.
type snapshot struct {
	at   time.Time
	fams map[string]metrics.Family
}

// maxMetricsBody bounds the body of a scrape that stat reads.
const maxMetricsBody = 256 << 20

// fetchSnapshot scrapes url. A body over limit bytes is refused: cut
// short, its last sample could parse with a truncated value.
func fetchSnapshot(ctx context.Context, client *http.Client, url string, limit int64) (*snapshot, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	body := &io.LimitedReader{R: resp.Body, N: limit + 1} // the byte past limit says it is over
	fams, err := metrics.Parse(body)
	if body.N == 0 {
		return nil, fmt.Errorf("GET %s: body too large: over %d bytes", url, limit)
	}
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	s := &snapshot{at: time.Now(), fams: map[string]metrics.Family{}}
	for _, f := range fams {
		s.fams[f.Name] = f
	}
	return s, nil
}

// value is the sample of family name with exactly the label values given
// (pairs), or 0 and false.
func (s *snapshot) value(name string, labels ...string) (float64, bool) {
	if s == nil {
		return 0, false
	}
next:
	for _, smp := range s.fams[name].Samples {
		for i := 0; i < len(labels); i += 2 {
			if smp.Label(labels[i]) != labels[i+1] {
				continue next
			}
		}
		return smp.Value, true
	}
	return 0, false
}

// sum adds the samples of family name whose labels include the pairs.
func (s *snapshot) sum(name string, labels ...string) float64 {
	var t float64
next:
	for _, smp := range s.fams[name].Samples {
		for i := 0; i < len(labels); i += 2 {
			if smp.Label(labels[i]) != labels[i+1] {
				continue next
			}
		}
		t += smp.Value
	}
	return t
}

// rate is the per-second rate of counter name (labels) since prev, or "-"
// without a previous scrape.
func (s *snapshot) rate(prev *snapshot, scale float64, name string, labels ...string) string {
	cur, ok := s.value(name, labels...)
	before, okPrev := prev.value(name, labels...)
	if !ok || !okPrev {
		return "-"
	}
	dt := s.at.Sub(prev.at).Seconds()
	if dt <= 0 || cur < before {
		return "-"
	}
	v := (cur - before) / dt * scale
	if v >= 100 {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f", v)
}

// nodes returns the node="..." label values, in order; "" for samples
// without one.
func (s *snapshot) nodes() []string {
	seen := map[string]bool{}
	var out []string
	for _, smp := range s.fams["sluice_messages_sent_total"].Samples {
		n := smp.Label("node")
		if !seen[n] {
			seen[n] = true
			out = append(out, n)
		}
	}
	return out
}

func (s *snapshot) render(b *strings.Builder, prev *snapshot, addr string) {
	fmt.Fprintf(b, "sluice stat %s  %s\n", addr, s.at.Format("15:04:05"))
	for _, node := range s.nodes() {
		nl := []string{"node", node}
		name := node
		if name == "" {
			name = "node"
		}
		fmt.Fprintf(b, "\n%s: out %s msgs/s %s MB/s, in %s msgs/s %s MB/s; dropped stale/dup/gap %.0f/%.0f/%.0f; injected drop/ctrldrop/dup/reset %.0f/%.0f/%.0f/%.0f; refused %.0f; alerts now stalled/slow %.0f/%.0f\n",
			name,
			s.rate(prev, 1, "sluice_messages_sent_total", nl...), s.rate(prev, 1e-6, "sluice_wire_bytes_sent_total", nl...),
			s.rate(prev, 1, "sluice_messages_received_total", nl...), s.rate(prev, 1e-6, "sluice_wire_bytes_received_total", nl...),
			s.sum("sluice_dropped_messages_total", append(nl, "cause", "stale")...), s.sum("sluice_dropped_messages_total", append(nl, "cause", "duplicate")...),
			s.sum("sluice_dropped_messages_total", append(nl, "cause", "gap")...),
			s.sum("sluice_faults_injected_total", append(nl, "kind", "drop")...), s.sum("sluice_faults_injected_total", append(nl, "kind", "ctrldrop")...),
			s.sum("sluice_faults_injected_total", append(nl, "kind", "dup")...), s.sum("sluice_faults_injected_total", append(nl, "kind", "reset")...),
			s.sum("sluice_refused_connections_total", nl...),
			s.sum("sluice_alerts_active", append(nl, "kind", "channel_stall")...), s.sum("sluice_alerts_active", append(nl, "kind", "slow_consumer")...))
		var peers []string
		for _, smp := range s.fams["sluice_peer_up"].Samples {
			if smp.Label("node") == node {
				peers = append(peers, smp.Label("peer"))
			}
		}
		if len(peers) == 0 {
			continue
		}
		tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "peer\tup\tmsgs/s\tMB/s\tresent/s\tblocked ms/s\tunacked\tunsent\twindow MiB\trtt ms\treconnects\tclock ms\tslow\t")
		for _, p := range peers {
			pl := []string{"node", node, "peer", p}
			get := func(name string) float64 { v, _ := s.value(name, pl...); return v }
			rtt := "-"
			if v, ok := s.value("sluice_peer_rtt_seconds", pl...); ok {
				rtt = fmt.Sprintf("%.2f", v*1e3)
			}
			clock := "-"
			if v, ok := s.value("sluice_peer_clock_offset_seconds", pl...); ok {
				clock = fmt.Sprintf("%+.3f±%.3f", v*1e3, get("sluice_peer_clock_error_seconds")*1e3)
			}
			slow := ""
			if get("sluice_peer_slow_consumer") > 0 {
				slow = "SLOW"
			}
			fmt.Fprintf(tw, "%s\t%.0f\t%s\t%s\t%s\t%s\t%.0f\t%.0f\t%.1f\t%s\t%.0f\t%s\t%s\t\n", p, get("sluice_peer_up"),
				s.rate(prev, 1, "sluice_peer_messages_sent_total", pl...), s.rate(prev, 1e-6, "sluice_peer_wire_bytes_sent_total", pl...),
				s.rate(prev, 1, "sluice_peer_resent_messages_total", pl...), s.rate(prev, 1e3, "sluice_peer_blocked_seconds_total", pl...),
				get("sluice_peer_unacked_messages"), get("sluice_peer_unsent_messages"), get("sluice_peer_window_bytes")/(1<<20),
				rtt, get("sluice_peer_reconnects_total"), clock, slow)
		}
		tw.Flush()
	}
	if gen, ok := s.value("sluice_engine_generation"); ok {
		lag, _ := s.value("sluice_engine_global_clock_lag_seconds")
		clk, _ := s.value("sluice_engine_global_clock")
		n, _ := s.value("sluice_engine_checkpoints_total")
		rec, _ := s.value("sluice_engine_recoveries_total")
		fmt.Fprintf(b, "\nengine: generation %.0f, global clock %.0f (advanced %.1f s ago), %s msgs/s processed, checkpoints %.0f", gen, clk, lag,
			s.rate(prev, 1, "sluice_engine_processed_messages_total"), n)
		if d, ok := s.value("sluice_engine_checkpoint_duration_seconds"); ok {
			age, _ := s.value("sluice_engine_checkpoint_age_seconds")
			fmt.Fprintf(b, " (last took %.1f ms, %.1f s ago)", d*1e3, age)
		}
		fmt.Fprintf(b, ", recoveries %.0f\n", rec)
	}
}
