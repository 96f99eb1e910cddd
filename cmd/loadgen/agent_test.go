package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench"
)

// syncBuffer is a log that tests can read while an agent writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// waitFor waits until the log holds sub, failing the test after 10 s.
func (s *syncBuffer) waitFor(t *testing.T, sub string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(s.String(), sub) {
		if time.Now().After(deadline) {
			t.Fatalf("log never said %q; it holds:\n%s", sub, s.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

type testAgent struct {
	*agent
	addr string
	log  *syncBuffer
}

// startAgent runs an agent on a loopback port until the test ends.
func startAgent(t *testing.T) *testAgent { return startAgentWith(t, nil) }

// startAgentWith is startAgent with setup applied to the agent before it
// serves.
func startAgentWith(t *testing.T, setup func(*agent)) *testAgent {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	log := &syncBuffer{}
	a := newAgent(ln, "", log)
	if setup != nil {
		setup(a)
	}
	served := make(chan error, 1)
	go func() { served <- a.serve(context.Background()) }()
	t.Cleanup(func() {
		a.close()
		if err := <-served; err != nil {
			t.Errorf("agent.serve: %v", err)
		}
	})
	return &testAgent{agent: a, addr: ln.Addr().String(), log: log}
}

// dialCtl opens a control connection to addr, as a coordinator would.
func dialCtl(t *testing.T, addr string) *ctlConn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return newCtlConn(c)
}

// recvType reads control messages, skipping heartbeats, until one arrives.
func recvType(t *testing.T, cc *ctlConn) ctlMsg {
	t.Helper()
	for {
		m, err := cc.recv(5 * time.Second)
		if err != nil {
			t.Fatalf("reading from the agent: %v", err)
		}
		if m.Type != msgProgress {
			return m
		}
	}
}

func goodPlan() agentPlan {
	return agentPlan{Version: ctlVersion, Size: 100, Channels: 2, Connections: 1, Messages: 100, Heartbeat: 50 * time.Millisecond}
}

func TestControlMessagesSurviveTheWire(t *testing.T) {
	p := goodPlan()
	msgs := []ctlMsg{
		{Type: msgPlan, Plan: &p},
		{Type: msgReady, Ready: &agentReady{DataAddr: "10.0.0.1:7401", Epoch: 1 << 62, Machine: bench.Machine{CPU: "x", Cores: 2}}},
		{Type: msgConnect, To: "10.0.0.1:7401", Index: 3},
		{Type: msgStart, StartAt: time.Now().UnixNano()},
		{Type: msgProgress, Progress: &agentProgress{Sent: 5, Delivered: 4}},
		{Type: msgDone, Done: &agentDone{Sent: 100, Elapsed: time.Second, Late: time.Millisecond, Resent: 2, Err: "x"}},
		{Type: msgCollect, Epochs: []uint64{1, 1<<64 - 1}},
		{Type: msgFindings, Findings: &agentFindings{BySender: map[uint64]findings{1<<64 - 1: {Delivered: 7, Gaps: 1}}, WireOut: 9}},
		{Type: msgError, Error: "plan: no"},
	}
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	tx, rx := newCtlConn(a), newCtlConn(b)
	go func() {
		for _, m := range msgs {
			if err := tx.send(m); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for _, want := range msgs {
		got, err := rx.recv(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("a %q message came out as %+v, want %+v", want.Type, got, want)
		}
	}
}

func TestControlLines(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		limit   int
		want    string
		wantErr error
	}{
		{"a line comes back without its newline", "{\"type\":\"bye\"}\n", 100, `{"type":"bye"}`, nil},
		{"a line longer than the read buffer is joined", strings.Repeat("x", 40) + "\n", 100, strings.Repeat("x", 40), nil},
		{"a line of exactly the limit is accepted", strings.Repeat("x", 40) + "\n", 40, strings.Repeat("x", 40), nil},
		{"a line over the limit is refused", strings.Repeat("x", 41) + "\n", 40, "", errCtlLineTooLong},
		{"a line cut off by the end of the stream is an unexpected EOF", `{"type":`, 100, "", io.ErrUnexpectedEOF},
		{"an empty stream is EOF", "", 100, "", io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := bufio.NewReaderSize(strings.NewReader(tt.in), 16)
			got, err := readCtlLine(r, tt.limit)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
			if string(got) != tt.want {
				t.Errorf("line %q, want %q", got, tt.want)
			}
		})
	}
}

func TestMalformedControlLinesAreErrors(t *testing.T) {
	for _, in := range []string{"not json\n", "{}\n", "{\"type\":\"\"}\n", "[1,2]\n"} {
		a, b := net.Pipe()
		go func() { a.Write([]byte(in)); a.Close() }()
		if m, err := newCtlConn(b).recv(time.Second); err == nil {
			t.Errorf("%q was read as %+v", in, m)
		}
		b.Close()
	}
}

func TestPlanValidation(t *testing.T) {
	tests := []struct {
		name    string
		change  func(*agentPlan)
		wantErr string
	}{
		{"a plan of the same protocol version with sane numbers is accepted", func(*agentPlan) {}, ""},
		{"a plan by duration alone is accepted", func(p *agentPlan) { p.Messages, p.Duration = 0, time.Second }, ""},
		{"a plan of another protocol version is refused", func(p *agentPlan) { p.Version = ctlVersion + 1 }, "version"},
		{"a payload too small for the send time and sequence is refused", func(p *agentPlan) { p.Size = 8 }, "--size 8"},
		{"no channels is refused", func(p *agentPlan) { p.Channels = 0 }, "--channels"},
		{"no connections is refused", func(p *agentPlan) { p.Connections = 0 }, "--connections"},
		{"a negative message count is refused", func(p *agentPlan) { p.Messages = -1 }, "messages"},
		{"neither messages nor a duration is refused", func(p *agentPlan) { p.Messages = 0 }, "--duration"},
		{"no heartbeat is refused", func(p *agentPlan) { p.Heartbeat = 0 }, "heartbeat"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := goodPlan()
			tt.change(&p)
			err := p.validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
}

func TestAgentAnswersABadPlanWithAnError(t *testing.T) {
	a := startAgent(t)
	cc := dialCtl(t, a.addr)
	p := goodPlan()
	p.Size = 8
	if err := cc.send(ctlMsg{Type: msgPlan, Plan: &p}); err != nil {
		t.Fatal(err)
	}
	m := recvType(t, cc)
	if m.Type != msgError || !strings.Contains(m.Error, "--size 8") {
		t.Fatalf("got %+v, want an error about --size 8", m)
	}
}

func TestAgentAnswersAMessageOutOfOrderWithAnError(t *testing.T) {
	a := startAgent(t)
	cc := dialCtl(t, a.addr)
	if err := cc.send(ctlMsg{Type: msgStart, StartAt: time.Now().UnixNano()}); err != nil {
		t.Fatal(err)
	}
	m := recvType(t, cc)
	if m.Type != msgError || !strings.Contains(m.Error, `"start", want "plan"`) {
		t.Fatalf("got %+v, want an error about start before plan", m)
	}
}

func TestAgentServesOneCoordinatorAtATime(t *testing.T) {
	a := startAgent(t)
	first := dialCtl(t, a.addr)
	p := goodPlan()
	if err := first.send(ctlMsg{Type: msgPlan, Plan: &p}); err != nil {
		t.Fatal(err)
	}
	if m := recvType(t, first); m.Type != msgReady {
		t.Fatalf("first coordinator got %+v, want ready", m)
	}
	// The agent reads a connection's first message before it refuses it:
	// an engine worker's connection is served beside a run.
	second := dialCtl(t, a.addr)
	if err := second.send(ctlMsg{Type: msgPlan, Plan: &p}); err != nil {
		t.Fatal(err)
	}
	if m := recvType(t, second); m.Type != msgError || !strings.Contains(m.Error, "busy") {
		t.Fatalf("second coordinator got %+v, want a busy error", m)
	}
}

func TestAgentAbortsItsRunWhenTheCoordinatorGoesAway(t *testing.T) {
	a := startAgent(t)
	cc := dialCtl(t, a.addr)
	p := goodPlan()
	if err := cc.send(ctlMsg{Type: msgPlan, Plan: &p}); err != nil {
		t.Fatal(err)
	}
	ready := recvType(t, cc)
	if ready.Type != msgReady {
		t.Fatalf("got %+v, want ready", ready)
	}
	if c, err := net.Dial("tcp", ready.Ready.DataAddr); err != nil {
		t.Fatalf("the agent's data port %s does not accept: %v", ready.Ready.DataAddr, err)
	} else {
		c.Close()
	}
	cc.c.Close()
	a.log.waitFor(t, "aborted: the coordinator went away")
	if c, err := net.Dial("tcp", ready.Ready.DataAddr); err == nil {
		c.Close()
		t.Errorf("the aborted run's data port %s still accepts", ready.Ready.DataAddr)
	}
	// The agent is free for the next coordinator.
	next := dialCtl(t, a.addr)
	if err := next.send(ctlMsg{Type: msgPlan, Plan: &p}); err != nil {
		t.Fatal(err)
	}
	if m := recvType(t, next); m.Type != msgReady {
		t.Fatalf("the next coordinator got %+v, want ready", m)
	}
}

func TestAgentHeartbeatsCarryItsCounters(t *testing.T) {
	a := startAgent(t)
	cc := dialCtl(t, a.addr)
	p := goodPlan()
	if err := cc.send(ctlMsg{Type: msgPlan, Plan: &p}); err != nil {
		t.Fatal(err)
	}
	var beats int
	for beats < 2 {
		m, err := cc.recv(time.Second)
		if err != nil {
			t.Fatalf("after %d heartbeats: %v", beats, err)
		}
		if m.Type == msgProgress {
			if m.Progress == nil {
				t.Fatal("a progress message without counters")
			}
			beats++
		}
	}
}
