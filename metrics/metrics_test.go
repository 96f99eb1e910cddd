package metrics

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport"
)

func TestASetIsWrittenSortedAndReadBackTheSame(t *testing.T) {
	s := NewSet()
	s.Gauge("b_depth", "Depth.", 3, "peer", `10.0.0.1:7400`)
	s.Counter("a_total", "Help with a \\ backslash\nand a newline.", 1e12, "quote", `say "hi"\now`, "x", "")
	s.Counter("a_total", "Help with a \\ backslash\nand a newline.", 0.5)
	s.Gauge("c", "", math.Inf(1))
	fams, err := s.Families()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := Write(&b, fams); err != nil {
		t.Fatal(err)
	}
	want := `# HELP a_total Help with a \\ backslash\nand a newline.
# TYPE a_total counter
a_total{quote="say \"hi\"\\now",x=""} 1e+12
a_total 0.5
# HELP b_depth Depth.
# TYPE b_depth gauge
b_depth{peer="10.0.0.1:7400"} 3
# TYPE c gauge
c +Inf
`
	if b.String() != want {
		t.Fatalf("written:\n%s\nwant:\n%s", b.String(), want)
	}
	back, err := Parse(&b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, fams) {
		t.Errorf("read back %+v, want %+v", back, fams)
	}
}

func TestASetRefusesBadNamesAndMixedTypes(t *testing.T) {
	for _, tc := range []struct {
		name string
		add  func(s *Set)
	}{
		{"a metric name with a dash", func(s *Set) { s.Gauge("a-b", "", 1) }},
		{"a label name with a colon", func(s *Set) { s.Gauge("a", "", 1, "x:y", "v") }},
		{"an odd label list", func(s *Set) { s.Gauge("a", "", 1, "x") }},
		{"a family of two types", func(s *Set) { s.Gauge("a", "", 1); s.Counter("a", "", 1) }},
	} {
		s := NewSet()
		tc.add(s)
		if _, err := s.Families(); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

func TestParseSaysWhatIsWrongAndWhere(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"a 1\nb{x=\"1\" 2\n", "line 2"},
		{"a one\n", "value"},
		{"# TYPE a counter\n# TYPE a gauge\n", "second TYPE"},
		{"a 1\n# TYPE a gauge\n", "after its samples"},
		{"# TYPE a fancy\n", "unknown type"},
		{"a{x=\"1\",x=\"2\"} 1\n", "twice"},
		{"a{x=\"\\q\"} 1\n", "escape"},
		{"a 1 2.5\n", "timestamp"},
	} {
		_, err := Parse(strings.NewReader(tc.in))
		var pe *ParseError
		if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want a ParseError about %q", tc.in, err, tc.want)
		}
	}
	if _, err := Parse(strings.NewReader("a " + strings.Repeat("1", MaxLine))); !errors.Is(err, ErrLineTooLong) {
		t.Errorf("a line over MaxLine: %v, want ErrLineTooLong", err)
	}
	fams, err := Parse(strings.NewReader("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_sum 3\nh_count 2\nplain 7 1700000000000\n"))
	if err != nil {
		t.Fatal(err)
	}
	if len(fams) != 2 || fams[0].Name != "h" || len(fams[0].Samples) != 3 || fams[1].Type != Untyped || fams[1].Samples[0].Value != 7 {
		t.Errorf("histogram and untyped sample parsed as %+v", fams)
	}
}

func FuzzParse(f *testing.F) {
	f.Add("# HELP a_total Help \\\\ x\\n y\n# TYPE a_total counter\na_total{p=\"q\\\"\"} 1\n")
	f.Add("# TYPE h summary\nh{quantile=\"0.5\"} 1\nh_sum 2\nh_count 3\nu NaN\nv -Inf 5\n")
	f.Add("a{x=\"1\",} 1\n#comment\n\n  b 2\n")
	f.Fuzz(func(t *testing.T, in string) {
		fams, err := Parse(strings.NewReader(in))
		if err != nil {
			return
		}
		// What parses is written back so that it parses to the same.
		var b bytes.Buffer
		if err := Write(&b, fams); err != nil {
			t.Fatal(err)
		}
		again, err := Parse(&b)
		if err != nil {
			t.Fatalf("written %q does not parse: %v", b.String(), err)
		}
		if !sameFamilies(fams, again) {
			t.Fatalf("parsed %+v, written and parsed again %+v", fams, again)
		}
	})
}

func sameFamilies(a, b []Family) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		fa, fb := a[i], b[i]
		if fa.Name != fb.Name || fa.Help != fb.Help || fa.Type != fb.Type || len(fa.Samples) != len(fb.Samples) {
			return false
		}
		for j := range fa.Samples {
			sa, sb := fa.Samples[j], fb.Samples[j]
			if sa.Name != sb.Name || !reflect.DeepEqual(sa.Labels, sb.Labels) ||
				math.Float64bits(sa.Value) != math.Float64bits(sb.Value) && !(math.IsNaN(sa.Value) && math.IsNaN(sb.Value)) {
				return false
			}
		}
	}
	return true
}

// scrape GETs url and parses the body.
func scrape(t *testing.T, url string) map[string]Family {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != ContentType {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %s, %q: %s", url, resp.Status, resp.Header.Get("Content-Type"), b)
	}
	fams, err := Parse(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]Family{}
	for _, f := range fams {
		m[f.Name] = f
	}
	return m
}

// value is the sample of family name whose labels include the given pairs.
func value(t *testing.T, m map[string]Family, name string, labels ...string) float64 {
	t.Helper()
	f, ok := m[name]
	if !ok {
		t.Fatalf("no family %s", name)
	}
next:
	for _, s := range f.Samples {
		for i := 0; i < len(labels); i += 2 {
			if s.Label(labels[i]) != labels[i+1] {
				continue next
			}
		}
		return s.Value
	}
	t.Fatalf("no sample of %s with labels %v", name, labels)
	return 0
}

// TestNodeCollectorExportsWhatTheNodeCounted runs traffic with injected
// loss between two nodes, then scrapes the sender over HTTP: every family
// says what the node's Stats say, summed independently here.
func TestNodeCollectorExportsWhatTheNodeCounted(t *testing.T) {
	const ahead = 2 * time.Second // the receiver's clock, as if it were wrong
	rx, err := transport.NewNode(transport.WithListen("127.0.0.1:0"), transport.WithClockOffset(ahead))
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Abort()
	var got atomic.Int64
	rx.HandleAll(func(taskid.ID) transport.Handler {
		return func(_ taskid.Channel, _ uint64, msgs []transport.Message) { got.Add(int64(len(msgs))) }
	})
	tx, err := transport.NewNode(transport.WithFaults(transport.Faults{Drop: 0.05, Seed: 9}))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Abort()
	p, err := tx.Peer(rx.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const channels = 3
	var senders []*transport.Sender
	for i := range channels {
		s, err := p.OpenSender(ctx, taskid.ID{Index: uint32(i)}, taskid.ID{Processor: 1})
		if err != nil {
			t.Fatal(err)
		}
		senders = append(senders, s)
	}
	// Rounds of 5,000 messages a channel until a loss was injected.
	n := 0
	for n == 0 || tx.Stats().Faults.DataDropped == 0 {
		buf := make([]byte, 100)
		for _, s := range senders {
			for k := range 5000 {
				binary.LittleEndian.PutUint64(buf, uint64(n+k))
				if err := s.Send(ctx, int64(k), buf); err != nil {
					t.Fatal(err)
				}
			}
		}
		n += 5000
	}
	for _, s := range senders {
		if err := s.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	srv := httptest.NewServer(Handler(NodeCollector(tx, NodeOptions{Channels: true, Name: "tx"}), NodeCollector(rx, NodeOptions{Name: "rx"})))
	defer srv.Close()
	// Both nodes in one scrape: the families are each node's samples side by
	// side; the sender's peer series name rx's address.
	m := scrape(t, srv.URL+"/metrics")
	st, chans := tx.Stats(), tx.ChannelStats()
	ps := st.Peers[0]
	var sent, resent uint64
	for _, c := range chans {
		sent += c.Sent
		resent += c.Resent
	}
	if sent != uint64(channels*n) || got.Load() != int64(channels*n) {
		t.Fatalf("sent %d, received %d, want %d", sent, got.Load(), channels*n)
	}
	if st.Faults.DataDropped == 0 || resent == 0 {
		t.Fatalf("no loss was injected (%+v) or repaired (%d re-sent): the test proves nothing", st.Faults, resent)
	}
	peer := rx.Addr()
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"sluice_peer_messages_sent_total", []string{"peer", peer}, float64(ps.Traffic.MessagesOut)},
		{"sluice_peer_resent_messages_total", []string{"peer", peer}, float64(resent)},
		{"sluice_peer_unacked_messages", []string{"peer", peer}, 0},
		{"sluice_peer_channels", []string{"peer", peer}, channels},
		{"sluice_peer_up", []string{"peer", peer}, 1},
		{"sluice_peer_connects_total", []string{"peer", peer}, 1},
		{"sluice_faults_injected_total", []string{"kind", "drop"}, float64(st.Faults.DataDropped)},
		{"sluice_alerts_total", []string{"kind", "channel_stall"}, float64(st.Alerts.ChannelStalls)},
		{"sluice_alerts_active", []string{"kind", "slow_consumer"}, float64(st.Alerts.Slow)},
		{"sluice_peer_slow_consumer", []string{"peer", peer}, 0},
		{"sluice_channel_sent_messages_total", []string{"channel", chans[0].Name}, float64(n)},
	} {
		if v := value(t, m, c.name, c.labels...); v != c.want {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	// The loops' load is exported, a share (transport's tests check its
	// value against a loop of known load).
	if v := value(t, m, "sluice_event_loop_busy_ratio"); v < 0 || v > 1 {
		t.Errorf("sluice_event_loop_busy_ratio = %v, want a share in [0, 1]", v)
	}
	// The receiver's sample of the received total counts at least every
	// message once (a dropped batch never arrives; re-sent ones do).
	var in float64
	for _, s := range m["sluice_messages_received_total"].Samples {
		in += s.Value
	}
	if in < float64(channels*n) {
		t.Errorf("sluice_messages_received_total sums to %v, want at least %d", in, channels*n)
	}
	// The connection pinged when it opened: both sides have a clock
	// estimate, within its bound of the true offset.
	off, bound := value(t, m, "sluice_peer_clock_offset_seconds", "peer", peer), value(t, m, "sluice_peer_clock_error_seconds", "peer", peer)
	if math.Abs(off-ahead.Seconds()) > bound+1e-6 {
		t.Errorf("sluice_peer_clock_offset_seconds %v ± %v, the receiver's clock is %v ahead", off, bound, ahead)
	}
	off = value(t, m, "sluice_accepted_clock_offset_seconds", "remote_node", fmt.Sprintf("%x", tx.ID()))
	bound = value(t, m, "sluice_accepted_clock_error_seconds", "remote_node", fmt.Sprintf("%x", tx.ID()))
	if math.Abs(off+ahead.Seconds()) > bound+1e-6 {
		t.Errorf("sluice_accepted_clock_offset_seconds %v ± %v, the sender's clock is %v behind", off, bound, ahead)
	}
	if m["sluice_peer_messages_sent_total"].Type != Counter || m["sluice_peer_unacked_messages"].Type != Gauge {
		t.Errorf("types %q and %q", m["sluice_peer_messages_sent_total"].Type, m["sluice_peer_unacked_messages"].Type)
	}
	resp, err := http.Post(srv.URL+"/metrics", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %s, want 405", resp.Status)
	}
}
