package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMetricsEndpointAndStatWatchARun runs the transport scenario with
// --metrics on a free port and, while it runs, reads the endpoint with
// 'loadgen stat': its second table shows the sending node's peer moving
// messages, and the endpoint serves Go's profiles too.
func TestMetricsEndpointAndStatWatchARun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	log := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"run", "--scenario", "transport", "--duration", "3s", "--rate", "0", "--channels", "4",
			"--metrics", "127.0.0.1:0", "--out", filepath.Join(t.TempDir(), "out")}, io.Discard, log)
	}()
	log.waitFor(t, "/metrics, profiles")
	addr := regexp.MustCompile(`metrics at http://([^/]+)/metrics`).FindStringSubmatch(log.String())
	if addr == nil {
		t.Fatalf("no metrics address in the log:\n%s", log.String())
	}
	// Until the nodes and the peer are up and counted in both of stat's
	// tables (the run takes a moment to start them).
	rowRE := regexp.MustCompile(`(?m)^\s*127\.0\.0\.1:\d+\s+1\s+(\d+(?:\.\d)?)\s`)
	var second string
	for {
		var out strings.Builder
		if err := run(ctx, []string{"stat", "--node", addr[1], "--count", "2", "--interval", "300ms"}, &out, io.Discard); err != nil {
			t.Fatal(err)
		}
		tables := strings.Split(out.String(), "sluice stat")
		if len(tables) != 3 {
			t.Fatalf("stat printed %d tables, want 2:\n%s", len(tables)-1, out.String())
		}
		second = tables[2]
		// The tx node's one peer: a row of its address and its msgs/s.
		if row := rowRE.FindStringSubmatch(second); row != nil && strings.Trim(row[1], "0.") != "" {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the run ended (%v) before stat saw its peer move messages; stat's last table:\n%s", err, second)
		case <-time.After(100 * time.Millisecond):
		}
	}
	if !strings.Contains(second, "rx:") || !strings.Contains(second, "tx:") || !strings.Contains(second, "blocked ms/s") {
		t.Errorf("stat's table lacks a node or the back-pressure column:\n%s", second)
	}
	// The peer's clock: one process, so an offset of 0 within its error
	// (to the table's microsecond).
	clock := regexp.MustCompile(`([+-]\d+\.\d{3})±(\d+\.\d{3})`).FindStringSubmatch(second)
	if clock == nil || !strings.Contains(second, "alerts now stalled/slow") {
		t.Fatalf("stat's table lacks the peer's clock offset or the alerts:\n%s", second)
	}
	off, _ := strconv.ParseFloat(clock[1], 64)
	bound, _ := strconv.ParseFloat(clock[2], 64)
	if math.Abs(off) > bound+0.001 {
		t.Errorf("the peer's clock is %v ms ± %v off in one process:\n%s", off, bound, second)
	}
	resp, err := http.Get("http://" + addr[1] + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("/debug/pprof/: %s", resp.Status)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A scrape whose body is longer than the limit is refused as too large,
// not cut at the limit, where its last sample would parse with a value cut
// short; one within the limit parses.
func TestStatRefusesAMetricsBodyOverItsLimit(t *testing.T) {
	const body = "# TYPE a counter\na 1\n# TYPE b counter\nb 123456789\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, body)
	}))
	defer srv.Close()
	cut := int64(strings.Index(body, "b 1234") + len("b 1234"))
	_, err := fetchSnapshot(context.Background(), srv.Client(), srv.URL, cut)
	if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("body too large: over %d bytes", cut)) {
		t.Fatalf("a body of %d bytes over a limit of %d: error %v, want body too large", len(body), cut, err)
	}
	s, err := fetchSnapshot(context.Background(), srv.Client(), srv.URL, int64(len(body)))
	if err != nil {
		t.Fatalf("a body of exactly the limit: %v", err)
	}
	if v, ok := s.value("b"); !ok || v != 123456789 {
		t.Errorf("b = %v (found %v), want 123456789", v, ok)
	}
}

// stat refuses a negative --count: it was taken, and stat exited at once
// with status 0 having shown nothing.
func TestStatRefusesANegativeCount(t *testing.T) {
	err := run(t.Context(), []string{"stat", "--node", closedAddr(t), "--count", "-1"}, io.Discard, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "--count") {
		t.Errorf("stat --count -1: %v, want an error naming --count", err)
	}
}
