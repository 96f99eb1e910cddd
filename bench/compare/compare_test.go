package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestEveryPeerDeliversExactlyWhatWasSent(t *testing.T) {
	cases := []struct {
		name string
		size int
		msgs int64
	}{
		{"100-byte messages arrive in order and all of them", 100, 1000},
		{"messages too short for a sequence number still arrive all of them", 3, 700},
		{"messages larger than a 64 KiB frame still arrive all of them", 70_000, 20},
	}
	for _, e := range registry {
		for _, c := range cases {
			t.Run(e.name+"/"+c.name, func(t *testing.T) {
				p := e.build(peerConfig{maxMsgs: c.msgs})
				// The duration is far longer than the test; the message limit ends the run.
				got, elapsed, err := p.Throughput(testCtx(t), c.size, time.Minute)
				if err != nil {
					t.Fatal(err)
				}
				if got != c.msgs {
					t.Fatalf("received %d messages, want %d", got, c.msgs)
				}
				if elapsed <= 0 {
					t.Fatalf("elapsed %v, want positive", elapsed)
				}
			})
		}
	}
}

func TestEveryPeerStopsAtTheDuration(t *testing.T) {
	for _, e := range registry {
		t.Run(e.name, func(t *testing.T) {
			got, _, err := e.build(peerConfig{}).Throughput(testCtx(t), 100, 30*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if got <= 0 {
				t.Fatalf("received %d messages in a 30 ms run", got)
			}
		})
	}
}

func TestEveryPeerRecordsOneRoundTripPerPing(t *testing.T) {
	for _, e := range registry {
		t.Run(e.name, func(t *testing.T) {
			h, err := e.build(peerConfig{}).Latency(testCtx(t), 100, 50)
			if err != nil {
				t.Fatal(err)
			}
			if h.count() != 50 {
				t.Fatalf("recorded %d round trips, want 50", h.count())
			}
			if l := h.percentiles(); l.P50 <= 0 || l.Max < l.P50 {
				t.Fatalf("percentiles %+v are not a distribution of round trips", l)
			}
		})
	}
}

func TestAPeerHonoursACancelledContext(t *testing.T) {
	for _, e := range registry {
		t.Run(e.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			p := e.build(peerConfig{})
			if _, _, err := p.Throughput(ctx, 100, time.Minute); err == nil {
				t.Error("a throughput run with a cancelled context succeeded")
			}
			if _, err := p.Latency(ctx, 100, 10); err == nil {
				t.Error("a latency run with a cancelled context succeeded")
			}
		})
	}
}

// packed builds a stream of length-prefixed messages with the given sequence numbers.
func packed(size int, seqs ...uint64) []byte {
	var b []byte
	payload := make([]byte, size)
	for _, s := range seqs {
		b = appendMsg(b, payload, s)
	}
	return b
}

func TestReadingPackedMessages(t *testing.T) {
	cases := []struct {
		name    string
		stream  []byte
		oneByte bool
		want    int64
		wantErr error
	}{
		{"a whole stream counts every message", packed(100, 0, 1, 2, 3), false, 4, nil},
		{"a stream read one byte at a time counts every message", packed(100, 0, 1, 2, 3), true, 4, nil},
		{"an empty stream has no messages", nil, false, 0, nil},
		{"a stream that ends inside a message is truncated", packed(100, 0, 1)[:150], false, 1, errTruncated},
		{"a skipped message is out of sequence", packed(100, 0, 2), false, 1, &seqError{}},
		{"a repeated message is out of sequence", packed(100, 0, 0), false, 1, &seqError{}},
		{"a message of another size has the wrong length", append(packed(100, 0), packed(99, 1)...), false, 1, errWrongLength},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var r = iotestReader(c.stream, c.oneByte)
			got, err := readPacked(r, 100)
			if got != c.want {
				t.Errorf("counted %d messages, want %d", got, c.want)
			}
			switch want := c.wantErr.(type) {
			case nil:
				if err != nil {
					t.Errorf("error %v, want none", err)
				}
			case *seqError:
				if !errors.As(err, &want) {
					t.Errorf("error %v, want a sequence error", err)
				}
			default:
				if !errors.Is(err, want) {
					t.Errorf("error %v, want %v", err, want)
				}
			}
		})
	}
}

func iotestReader(b []byte, oneByte bool) interface{ Read([]byte) (int, error) } {
	if oneByte {
		return iotest.OneByteReader(bytes.NewReader(b))
	}
	return bytes.NewReader(b)
}

func TestParsingLeavesAnIncompleteMessageForTheNextRead(t *testing.T) {
	b := packed(10, 0, 1)
	c := &checker{size: 10}
	msgs, used, err := parseMsgs(b[:len(b)-1], c)
	if err != nil || msgs != 1 || used != 14 {
		t.Fatalf("parseMsgs = %d msgs, %d bytes, %v; want 1 msg, 14 bytes, no error", msgs, used, err)
	}
	msgs, used, err = parseMsgs(b[used:], c)
	if err != nil || msgs != 1 || used != 14 {
		t.Fatalf("second parseMsgs = %d msgs, %d bytes, %v; want 1 msg, 14 bytes, no error", msgs, used, err)
	}
}

func TestTheRawCodecRefusesAnythingButBytes(t *testing.T) {
	if _, err := (rawCodec{}).Marshal("text"); !errors.Is(err, errNotBytes) {
		t.Errorf("Marshal(string) error %v, want %v", err, errNotBytes)
	}
	if err := (rawCodec{}).Unmarshal([]byte("x"), new(string)); !errors.Is(err, errNotBytes) {
		t.Errorf("Unmarshal(*string) error %v, want %v", err, errNotBytes)
	}
	m := []byte("abc")
	out, err := (rawCodec{}).Marshal(&m)
	if err != nil || string(out) != "abc" {
		t.Fatalf("Marshal = %q, %v", out, err)
	}
	m[0] = 'x'
	if string(out) != "abc" {
		t.Errorf("Marshal's result changed with the sender's buffer: %q", out)
	}
}

func TestRatiosPairSluiceWithEveryPeerAndEveryPeerWithTCP(t *testing.T) {
	cases := []struct {
		name  string
		order []string
		want  []string
	}{
		{"with every peer present", []string{"tcp", "grpc", "grpc-packed", "nats", "sluice"},
			[]string{"sluice/tcp", "sluice/grpc", "sluice/grpc-packed", "sluice/nats", "grpc/tcp", "grpc-packed/tcp", "nats/tcp"}},
		{"without sluice only peers against tcp", []string{"tcp", "grpc", "nats"}, []string{"grpc/tcp", "nats/tcp"}},
		{"without tcp only sluice against the rest", []string{"grpc", "sluice"}, []string{"sluice/grpc"}},
		{"a lone peer has no ratio", []string{"tcp"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var got []string
			for _, p := range ratioPairs(c.order) {
				got = append(got, p[0]+"/"+p[1])
			}
			if !slices.Equal(got, c.want) {
				t.Errorf("pairs %v, want %v", got, c.want)
			}
		})
	}
	r := &report{Order: []string{"tcp", "nats"}, Peers: map[string]peerResult{
		"tcp":  {ThroughputMsgsPerS: 400, LatencyUS: latencyUS{P99: 10}},
		"nats": {ThroughputMsgsPerS: 100, LatencyUS: latencyUS{P99: 30}},
	}}
	r.fillRatios()
	if r.Ratios["nats/tcp"] != 0.25 || r.P99Ratios["nats/tcp"] != 3 {
		t.Errorf("nats/tcp ratios %v, %v; want 0.25 throughput, 3 p99", r.Ratios, r.P99Ratios)
	}
}

func TestAnUnknownPeerIsRefusedByName(t *testing.T) {
	_, err := buildPeers([]string{"tcp", "carrier-pigeon"}, peerConfig{})
	if !errors.Is(err, errUnknownPeer) || !strings.Contains(err.Error(), "carrier-pigeon") {
		t.Fatalf("error %v, want %v naming carrier-pigeon", err, errUnknownPeer)
	}
}

func TestTheLastStdoutLineIsTheJSONReport(t *testing.T) {
	out := t.TempDir()
	var stdout bytes.Buffer
	args := []string{"--size", "64", "--duration", "40ms", "--pings", "200", "--peers", "grpc,tcp", "--json", "--out", out}
	if err := run(testCtx(t), args, &stdout); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	last := lines[len(lines)-1]
	var doc map[string]any
	if err := json.Unmarshal([]byte(last), &doc); err != nil {
		t.Fatalf("last line is not JSON: %v\n%s", err, last)
	}
	if doc["size"] != 64.0 || doc["duration_s"] != 0.04 {
		t.Errorf("size %v, duration_s %v; want 64, 0.04", doc["size"], doc["duration_s"])
	}
	m, _ := doc["machine"].(map[string]any)
	if c, _ := m["cores"].(float64); c < 1 {
		t.Errorf("machine %v has no cores", m)
	}
	peers, _ := doc["peers"].(map[string]any)
	if len(peers) != 2 {
		t.Errorf("peers %v, want grpc and tcp only", peers)
	}
	for _, name := range []string{"tcp", "grpc"} {
		p, _ := peers[name].(map[string]any)
		if v, _ := p["throughput_msgs_per_s"].(float64); v <= 0 {
			t.Errorf("%s throughput_msgs_per_s %v, want positive", name, p["throughput_msgs_per_s"])
		}
		if v, _ := p["throughput_bytes_per_s"].(float64); v <= 0 {
			t.Errorf("%s throughput_bytes_per_s %v, want positive", name, p["throughput_bytes_per_s"])
		}
		lat, _ := p["latency_us"].(map[string]any)
		for _, k := range []string{"p50", "p90", "p99", "p999", "p9999", "max"} {
			if v, _ := lat[k].(float64); v <= 0 {
				t.Errorf("%s latency_us.%s = %v, want positive", name, k, lat[k])
			}
		}
	}
	ratios, _ := doc["ratios"].(map[string]any)
	if len(ratios) != 1 || ratios["grpc/tcp"] == nil {
		t.Errorf("ratios %v, want grpc/tcp only", ratios)
	}
	for _, f := range []string{"compare.json", "compare.md"} {
		if fi, err := os.Stat(filepath.Join(out, f)); err != nil || fi.Size() == 0 {
			t.Errorf("%s not written: %v", f, err)
		}
	}
	if order, _ := doc["order"].([]any); len(order) != 2 || order[0] != "tcp" {
		t.Errorf("order %v, want tcp first", order)
	}
}
