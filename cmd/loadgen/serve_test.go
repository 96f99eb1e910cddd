package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/cmd/loadgen/internal/control"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport"
)

// startServer runs serve's node on a loopback port until the test ends.
func startServer(t *testing.T) (*server, *syncBuffer) {
	t.Helper()
	log := &syncBuffer{}
	s, err := newServer("127.0.0.1:0", nil, 0, true, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.node.Abort)
	return s, log
}

// peerAddrs lists the peers n keeps, which it dials and redials.
func peerAddrs(n *transport.Node) []string {
	var addrs []string
	for _, p := range n.Stats().Peers {
		addrs = append(addrs, p.Addr)
	}
	return addrs
}

// send's report request is answered, and the serving node keeps no peer
// for the address the answer went to.
func TestServeAnswersSendAndKeepsNoPeer(t *testing.T) {
	s, _ := startServer(t)
	err := run(context.Background(), []string{"send", "--to", s.node.Addr(), "--messages", "2000", "--channels", "2",
		"--clock-correction=false", "--out", t.TempDir()}, io.Discard, io.Discard)
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	if peers := peerAddrs(s.node); len(peers) != 0 {
		t.Errorf("after answering, serve's node keeps peers %v, which it redials for as long as it runs", peers)
	}
}

// A report request naming an address where nobody answers costs serve one
// failed answer, and its node no peer redialling that address.
func TestServeForgetsABogusReplyAddress(t *testing.T) {
	s, log := startServer(t)
	s.replyTimeout = 100 * time.Millisecond
	bogus := closedAddr(t)
	tx, err := transport.NewNode()
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Abort()
	p, err := tx.Peer(s.node.Addr())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctl, err := p.OpenSender(ctx, controlSource, controlTarget)
	if err != nil {
		t.Fatal(err)
	}
	req, _ := json.Marshal(reportRequest{Epoch: 7, ReplyTo: bogus})
	if err := ctl.Send(ctx, 0, req); err != nil {
		t.Fatal(err)
	}
	log.waitFor(t, "answering "+bogus+":")
	if peers := peerAddrs(s.node); len(peers) != 0 {
		t.Errorf("serve's node keeps peers %v after answering %s failed, and redials them for as long as it runs", peers, bogus)
	}
}

// serve counts a payload too short for the header as malformed, apart from
// what it delivered and the gaps, and its answer to send says so.
func TestServeCountsShortPayloadsAsMalformed(t *testing.T) {
	s, _ := startServer(t)
	stamped := func(seq uint64) transport.Message {
		p := make([]byte, headerLen)
		bench.Stamp(p, bench.Now(), seq)
		return transport.Message{Payload: p}
	}
	ch := taskid.Channel{Source: taskid.ID{Index: 3}, Target: taskid.ID{Processor: 1, Index: 3}, Epoch: 9}
	s.handler(ch.Target)(ch, 0, []transport.Message{stamped(0), {Payload: []byte("short")}, stamped(1)})
	f := s.session(9).received()
	if f.Delivered != 2 || f.Gaps != 0 || f.Malformed != 1 {
		t.Fatalf("delivered %d, gaps %d, malformed %d; want 2, 0 and 1", f.Delivered, f.Gaps, f.Malformed)
	}
}

// send's report says how many malformed payloads serve counted.
func TestSendReportsServesMalformedPayloads(t *testing.T) {
	rec := bench.NewRecorder()
	rec.RecordN(20_000, 100)
	to := fakeServe(t, control.Received{Delivered: 100, Malformed: 3, Latency: rec.Snapshot().Export()})
	var out strings.Builder
	err := run(context.Background(), []string{"send", "--to", to, "--messages", "100", "--clock-correction=false", "--json", "--out", t.TempDir()}, &out, io.Discard)
	if err != nil {
		t.Fatalf("send: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	var r bench.Report
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		t.Fatal(err)
	}
	if notes := strings.Join(r.Notes, "\n"); !strings.Contains(notes, "serve says 3 messages arrived with payloads shorter than the 16-byte header") {
		t.Errorf("the report's notes do not count the 3 malformed payloads:\n%s", notes)
	}
}

// A run's session, with its latency recorder, ends with the answer to its
// report request: a serve that outlives many runs does not keep them all.
func TestServeForgetsARunOnceItIsAnswered(t *testing.T) {
	s, _ := startServer(t)
	out := t.TempDir()
	for range 3 {
		err := run(context.Background(), []string{"send", "--to", s.node.Addr(), "--messages", "1000",
			"--clock-correction=false", "--out", out}, io.Discard, io.Discard)
		if err != nil {
			t.Fatalf("send: %v", err)
		}
	}
	s.mu.Lock()
	live, runs := len(s.sessions), s.runs
	s.mu.Unlock()
	if live != 0 || runs != 3 {
		t.Errorf("%d sessions kept after 3 answered runs (%d started), want none", live, runs)
	}
}

// Runs that never ask for their findings are forgotten, the least recently
// active first, once more than maxSessions are live; the others keep theirs.
func TestServeKeepsAtMostMaxSessions(t *testing.T) {
	s, log := startServer(t)
	ch := func(epoch uint64) taskid.Channel {
		return taskid.Channel{Source: taskid.ID{Index: 0}, Target: taskid.ID{Processor: 1, Index: 0}, Epoch: epoch}
	}
	msg := func(seq uint64) []transport.Message {
		p := make([]byte, headerLen)
		bench.Stamp(p, bench.Now(), seq)
		return []transport.Message{{Payload: p}}
	}
	for e := range uint64(maxSessions) {
		s.handler(ch(e).Target)(ch(e), 0, msg(0))
	}
	s.handler(ch(0).Target)(ch(0), 1, msg(1))
	s.mu.Lock()
	for e, ss := range s.sessions { // run 1 the stalest, run 0 the most recent
		ss.last.Store(int64(e))
	}
	s.sessions[0].last.Store(maxSessions)
	s.mu.Unlock()
	s.handler(ch(maxSessions).Target)(ch(maxSessions), 0, msg(0))
	s.mu.Lock()
	_, kept0 := s.sessions[0]
	_, kept1 := s.sessions[1]
	live := len(s.sessions)
	s.mu.Unlock()
	if live != maxSessions || !kept0 || kept1 {
		t.Fatalf("%d sessions, run 0 kept %v, run 1 kept %v: want %d, the stalest (1) forgotten", live, kept0, kept1, maxSessions)
	}
	if !strings.Contains(log.String(), "forgetting run 1,") {
		t.Errorf("serve did not say which run it forgot:\n%s", log)
	}
	if f := s.session(0).received(); f.Delivered != 2 {
		t.Errorf("run 0 delivered %d, want its 2", f.Delivered)
	}
}

// At most maxReplies answers are on their way at once; a report request
// beyond them is refused with a line that says so.
func TestServeBoundsTheAnswersOnTheirWay(t *testing.T) {
	s, log := startServer(t)
	s.replying.Store(maxReplies) // as many answers on their way as allowed
	req, _ := json.Marshal(reportRequest{Epoch: 5, ReplyTo: closedAddr(t)})
	s.onControl(taskid.Channel{}, 0, []transport.Message{{Payload: req}})
	if !strings.Contains(log.String(), "refusing the report request of run 5") {
		t.Fatalf("a request over the limit was not refused:\n%s", log)
	}
	if n := s.replying.Load(); n != maxReplies {
		t.Errorf("%d answers on their way, want %d", n, maxReplies)
	}
}

// A serve that dies while send is sending ends the run once its connection
// has been down for --timeout, with an error that says so: send used to
// wait for credit from it for ever, printing 'rate 0 msgs/s' each second.
func TestSendGivesUpOnAServeThatDied(t *testing.T) {
	s, _ := startServer(t)
	go func() {
		for s.delivered.Load() == 0 {
			time.Sleep(time.Millisecond)
		}
		s.node.Abort()
	}()
	// The deadline only keeps a send that never gives up from hanging the
	// test; a send that does gives up long before it.
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	err := run(ctx, []string{"send", "--to", s.node.Addr(), "--messages", "1000000000", "--timeout", "300ms",
		"--clock-correction=false", "--out", t.TempDir()}, io.Discard, io.Discard)
	if err == nil || ctx.Err() != nil || !strings.Contains(err.Error(), "lost its connection to serve") {
		t.Fatalf("send to a serve that died: %v, want an error saying it lost its connection to serve", err)
	}
}

// send refuses a --timeout that is not positive before it sends anything:
// it was taken, and the run failed only after sending every message, with
// 'serve did not confirm everything within 0s'.
func TestSendRefusesATimeoutThatIsNotPositive(t *testing.T) {
	for _, d := range []string{"0s", "-1s"} {
		err := run(t.Context(), []string{"send", "--to", closedAddr(t), "--timeout", d, "--out", t.TempDir()}, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--timeout must be positive") {
			t.Errorf("send --timeout %s: %v, want an error saying --timeout must be positive", d, err)
		}
	}
}

// An interrupted send still has serve confirm what it sent and reports
// it, every message exactly once, with a failure saying it was interrupted
// (exit status 1); it used to end with a bare "context canceled" and no
// report.
func TestAnInterruptedSendReportsWhatItSentAndFails(t *testing.T) {
	s, _ := startServer(t)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	go func() { // interrupt once serve has taken some
		for s.delivered.Load() < 1000 && ctx.Err() == nil {
			time.Sleep(time.Millisecond)
		}
		cancel()
	}()
	var stdout bytes.Buffer
	err := run(ctx, []string{"send", "--to", s.node.Addr(), "--messages", "1000000000", "--rate", "20000",
		"--clock-correction=false", "--json", "--out", t.TempDir()}, &stdout, io.Discard)
	if !errors.Is(err, errFailed) || exitCode(err) != 1 {
		t.Fatalf("an interrupted send returned %v (exit status %d), want a failed run's (1)", err, exitCode(err))
	}
	lines := strings.Split(strings.TrimSpace(stdout.String()), "\n")
	var r bench.Report
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &r); err != nil {
		t.Fatalf("no report: %v\n%s", err, stdout.String())
	}
	if f := strings.Join(r.Failures, "; "); !strings.Contains(f, "interrupted after") {
		t.Errorf("the report's failures %q do not say the send was interrupted", f)
	}
	if r.MessagesSent < 1000 || r.MessagesDelivered != r.MessagesSent || r.Lost != 0 || r.Duplicates != 0 {
		t.Errorf("sent %d, delivered %d, lost %d, duplicates %d: want what was sent delivered once",
			r.MessagesSent, r.MessagesDelivered, r.Lost, r.Duplicates)
	}
}
