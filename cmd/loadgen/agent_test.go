package main

import (
	"bytes"
	"context"
	"errors"
	"math"
	"net"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/cmd/loadgen/internal/control"
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
func dialCtl(t *testing.T, addr string) *control.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return control.NewConn(c)
}

// recvType reads control messages, skipping heartbeats, until one arrives.
func recvType(t *testing.T, cc *control.Conn) control.Msg {
	t.Helper()
	for {
		m, err := cc.Recv(5 * time.Second)
		if err != nil {
			t.Fatalf("reading from the agent: %v", err)
		}
		if m.Kind != control.KindProgress {
			return m
		}
	}
}

func goodPlan() control.Plan {
	return control.Plan{Version: control.Version, Size: 100, Channels: 2, Connections: 1, Messages: 100, Heartbeat: 50 * time.Millisecond}
}

// An agent checks a plan's protocol fields (package control tests them)
// and the load it describes, as loadgen run checks its flags.
func TestPlanValidation(t *testing.T) {
	tests := []struct {
		name    string
		change  func(*control.Plan)
		wantErr string
	}{
		{"a plan of the same protocol version with sane numbers is accepted", func(*control.Plan) {}, ""},
		{"a plan by duration alone is accepted", func(p *control.Plan) { p.Messages, p.Duration = 0, time.Second }, ""},
		{"the protocol fields are checked: another version is refused", func(p *control.Plan) { p.Version = control.Version + 1 }, "version"},
		{"a payload too small for the send time and sequence is refused", func(p *control.Plan) { p.Size = 8 }, "--size 8"},
		{"no channels is refused", func(p *control.Plan) { p.Channels = 0 }, "--channels"},
		{"no connections is refused", func(p *control.Plan) { p.Connections = 0 }, "--connections"},
		{"neither messages nor a duration is refused", func(p *control.Plan) { p.Messages = 0 }, "--duration"},
		{"the largest payload a window holds is accepted", func(p *control.Plan) { p.Size = maxSize }, ""},
		{"a payload larger than a window holds is refused", func(p *control.Plan) { p.Size = maxSize + 1 }, "the largest payload a channel's window"},
		{"the largest payload an int holds is refused", func(p *control.Plan) { p.Size = math.MaxInt }, "--size " + strconv.Itoa(math.MaxInt) + " is above"},
		{"as many channels as a connection takes is accepted", func(p *control.Plan) { p.Channels = maxChannels }, ""},
		{"more channels than a connection takes are refused", func(p *control.Plan) { p.Channels = maxChannels + 1 }, "--channels must be 1 to 65535"},
		{"as many channels as an int holds are refused", func(p *control.Plan) { p.Channels = math.MaxInt }, "--channels must be 1 to 65535"},
		{"as many connections as a receiver accepts from a host is accepted", func(p *control.Plan) { p.Connections = maxConnections }, ""},
		{"more connections than a receiver accepts from a host are refused", func(p *control.Plan) { p.Connections = 1 << 30 }, "--connections must be 1 to 64"},
		{"producers and a delivery are accepted", func(p *control.Plan) { p.Producers, p.Delivery = 3, "goroutine" }, ""},
		{"negative producers are refused", func(p *control.Plan) { p.Producers = -1 }, "--producers must not be negative"},
		{"an unknown delivery is refused", func(p *control.Plan) { p.Delivery = "carrier pigeon" }, "--delivery must be auto, inline or goroutine"},
		{"inline delivery at a consume rate is refused", func(p *control.Plan) { p.Delivery, p.ConsumeRate = "inline", 100 }, "--delivery inline cannot"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := goodPlan()
			tt.change(&p)
			err := validatePlan(&p)
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
	if err := cc.Send(control.Msg{Kind: control.KindPlan, Plan: &p}); err != nil {
		t.Fatal(err)
	}
	m := recvType(t, cc)
	if m.Kind != control.KindError || !strings.Contains(m.Error, "--size 8") {
		t.Fatalf("got %+v, want an error about --size 8", m)
	}
}

func TestAgentAnswersAMessageOutOfOrderWithAnError(t *testing.T) {
	a := startAgent(t)
	cc := dialCtl(t, a.addr)
	if err := cc.Send(control.Msg{Kind: control.KindStart, StartAt: time.Now().UnixNano()}); err != nil {
		t.Fatal(err)
	}
	m := recvType(t, cc)
	if m.Kind != control.KindError || !strings.Contains(m.Error, `"start", want "plan"`) {
		t.Fatalf("got %+v, want an error about start before plan", m)
	}
}

func TestAgentServesOneCoordinatorAtATime(t *testing.T) {
	a := startAgent(t)
	first := dialCtl(t, a.addr)
	p := goodPlan()
	if err := first.Send(control.Msg{Kind: control.KindPlan, Plan: &p}); err != nil {
		t.Fatal(err)
	}
	if m := recvType(t, first); m.Kind != control.KindReady {
		t.Fatalf("first coordinator got %+v, want ready", m)
	}
	// The agent reads a connection's first message before it refuses it:
	// an engine worker's connection is served beside a run.
	second := dialCtl(t, a.addr)
	if err := second.Send(control.Msg{Kind: control.KindPlan, Plan: &p}); err != nil {
		t.Fatal(err)
	}
	if m := recvType(t, second); m.Kind != control.KindError || !strings.Contains(m.Error, "busy") {
		t.Fatalf("second coordinator got %+v, want a busy error", m)
	}
}

func TestAgentAbortsItsRunWhenTheCoordinatorGoesAway(t *testing.T) {
	a := startAgent(t)
	cc := dialCtl(t, a.addr)
	p := goodPlan()
	if err := cc.Send(control.Msg{Kind: control.KindPlan, Plan: &p}); err != nil {
		t.Fatal(err)
	}
	ready := recvType(t, cc)
	if ready.Kind != control.KindReady {
		t.Fatalf("got %+v, want ready", ready)
	}
	if c, err := net.Dial("tcp", ready.Ready.DataAddr); err != nil {
		t.Fatalf("the agent's data port %s does not accept: %v", ready.Ready.DataAddr, err)
	} else {
		c.Close()
	}
	cc.Close()
	a.log.waitFor(t, "aborted: the coordinator went away")
	if c, err := net.Dial("tcp", ready.Ready.DataAddr); err == nil {
		c.Close()
		t.Errorf("the aborted run's data port %s still accepts", ready.Ready.DataAddr)
	}
	// The agent is free for the next coordinator.
	next := dialCtl(t, a.addr)
	if err := next.Send(control.Msg{Kind: control.KindPlan, Plan: &p}); err != nil {
		t.Fatal(err)
	}
	if m := recvType(t, next); m.Kind != control.KindReady {
		t.Fatalf("the next coordinator got %+v, want ready", m)
	}
}

func TestAgentHeartbeatsCarryItsCounters(t *testing.T) {
	a := startAgent(t)
	cc := dialCtl(t, a.addr)
	p := goodPlan()
	if err := cc.Send(control.Msg{Kind: control.KindPlan, Plan: &p}); err != nil {
		t.Fatal(err)
	}
	var beats int
	for beats < 2 {
		m, err := cc.Recv(time.Second)
		if err != nil {
			t.Fatalf("after %d heartbeats: %v", beats, err)
		}
		if m.Kind == control.KindProgress {
			if m.Progress == nil {
				t.Fatal("a progress message without counters")
			}
			beats++
		}
	}
}

// A line that breaks the protocol is answered with an error saying how, as
// the first message and in the middle of a run, and the run ends.
func TestAgentAnswersALineThatBreaksTheProtocolWithAnError(t *testing.T) {
	a := startAgent(t)
	for _, tt := range []struct {
		name, before, line, want string
	}{
		{"a first message without its body", "", `{"type":"worker"}`, `"worker" without its body`},
		{"a first message of no known kind", "", `{"type":"hello"}`, `unknown message kind "hello"`},
		{"a line that is not JSON in a run", "plan", `plan please`, "malformed message"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := net.Dial("tcp", a.addr)
			if err != nil {
				t.Fatal(err)
			}
			cc := control.NewConn(c)
			t.Cleanup(func() { cc.Close() })
			if tt.before == "plan" {
				p := goodPlan()
				if err := cc.Send(control.Msg{Kind: control.KindPlan, Plan: &p}); err != nil {
					t.Fatal(err)
				}
				if m := recvType(t, cc); m.Kind != control.KindReady {
					t.Fatalf("got %+v, want ready", m)
				}
			}
			if _, err := c.Write([]byte(tt.line + "\n")); err != nil {
				t.Fatal(err)
			}
			m := recvType(t, cc)
			if m.Kind != control.KindError || !strings.Contains(m.Error, tt.want) {
				t.Fatalf("got %q %q, want an error saying %q", m.Kind, m.Error, tt.want)
			}
		})
	}
	a.log.waitFor(t, "failed: control: malformed message")
}

// A connection that sends nothing is told so and closed after the first
// message's deadline, instead of being held forever.
func TestAgentClosesAConnectionThatSendsNothing(t *testing.T) {
	a := startAgentWith(t, func(a *agent) { a.firstTimeout = 50 * time.Millisecond })
	cc := dialCtl(t, a.addr)
	m := recvType(t, cc)
	if m.Kind != control.KindError || !strings.Contains(m.Error, "no message within 50ms of connecting") {
		t.Fatalf("got %q %q, want an error saying no message came in time", m.Kind, m.Error)
	}
	if _, err := cc.Recv(5 * time.Second); err == nil || errors.Is(err, control.ErrTimeout) {
		t.Errorf("after the error the connection gave %v, want it closed", err)
	}
}

// Before its first message (and before its key is proven) a connection may
// not send a line longer than control.MaxOpeningLine: the agent stops
// reading it there instead of buffering up to control.MaxLine.
func TestAgentRefusesALongLineBeforeTheFirstMessage(t *testing.T) {
	long := append(bytes.Repeat([]byte("x"), control.MaxOpeningLine+1), '\n')
	t.Run("without a key the peer is told", func(t *testing.T) {
		a := startAgent(t)
		c, err := net.Dial("tcp", a.addr)
		if err != nil {
			t.Fatal(err)
		}
		cc := control.NewConn(c)
		t.Cleanup(func() { cc.Close() })
		if _, err := c.Write(long); err != nil {
			t.Fatal(err)
		}
		m := recvType(t, cc)
		if m.Kind != control.KindError || !strings.Contains(m.Error, "line too long: over 65536 bytes") {
			t.Fatalf("got %q %q, want an error saying the line is over 65536 bytes", m.Kind, m.Error)
		}
	})
	t.Run("with a key it is refused before the key exchange ends", func(t *testing.T) {
		a := startAgentWith(t, func(a *agent) { a.key = bytes.Repeat([]byte("k"), 32) })
		c, err := net.Dial("tcp", a.addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		if _, err := c.Write(long); err != nil {
			t.Fatal(err)
		}
		a.log.waitFor(t, "refused coordinator")
		a.log.waitFor(t, "line too long: over 65536 bytes")
	})
}

// An agent serves at most maxConns control connections at once, answers
// the next with an error saying so, and serves again once one has closed.
func TestAgentRefusesConnectionsBeyondItsLimit(t *testing.T) {
	a := startAgentWith(t, func(a *agent) { a.maxConns = 2 })
	first := dialCtl(t, a.addr)
	dialCtl(t, a.addr)
	third := dialCtl(t, a.addr)
	m := recvType(t, third)
	if m.Kind != control.KindError || !strings.Contains(m.Error, "2 control connections are open, the most it serves at once") {
		t.Fatalf("the third connection got %q %q, want an error saying 2 are open, the limit", m.Kind, m.Error)
	}
	a.log.waitFor(t, "refused a control connection")
	first.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a.mu.Lock()
		n := len(a.mu.conns)
		a.mu.Unlock()
		if n < 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the agent still counts %d connections after one closed", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	next := dialCtl(t, a.addr)
	p := goodPlan()
	if err := next.Send(control.Msg{Kind: control.KindPlan, Plan: &p}); err != nil {
		t.Fatal(err)
	}
	if m := recvType(t, next); m.Kind != control.KindReady {
		t.Fatalf("once a connection closed, the next got %q %q, want ready", m.Kind, m.Error)
	}
}

// An agent sends and delivers as its plan says: the producers and delivery
// that coordinate's flags set, its own defaults when they are not.
func TestPlanConfigTakesProducersAndDelivery(t *testing.T) {
	p := goodPlan()
	if cfg := planConfig(&p); !cfg.inline() || cfg.producerCount() != max(1, runtime.GOMAXPROCS(0)/2) {
		t.Errorf("an unset plan delivers inline %v with %d producers; want inline and half the cores", cfg.inline(), cfg.producerCount())
	}
	p.Producers, p.Delivery = 3, "goroutine"
	if cfg := planConfig(&p); cfg.inline() || cfg.producerCount() != 3 {
		t.Errorf("a plan of 3 producers and goroutine delivery delivers inline %v with %d producers", cfg.inline(), cfg.producerCount())
	}
	p.Delivery, p.ConsumeRate = "", 1000
	if cfg := planConfig(&p); cfg.inline() {
		t.Error("a plan with a consume rate and no delivery delivers inline")
	}
}

// A collect names the sender epochs whose findings the coordinator wants;
// the agent answers for the runs that sent to it, and makes up nothing for
// an epoch that never did. It used to start a session for each epoch named,
// and send back an empty latency histogram (about 220 KB in memory, 55 KB
// on the line) for each: a collect line of a few tens of KB, naming
// thousands of epochs, made the agent hold gigabytes.
func TestAgentAnswersACollectOnlyForRunsThatSentToIt(t *testing.T) {
	a := startAgent(t)
	cc := dialCtl(t, a.addr)
	p := goodPlan()
	steps := []struct {
		send control.Msg
		want control.Kind
	}{
		{control.Msg{Kind: control.KindPlan, Plan: &p}, control.KindReady},
		{control.Msg{Kind: control.KindConnect}, control.KindConnected}, // receives only
	}
	for _, s := range steps {
		if err := cc.Send(s.send); err != nil {
			t.Fatal(err)
		}
		if m := recvType(t, cc); m.Kind != s.want {
			t.Fatalf("answered %s with %q %q, want %q", s.send.Kind, m.Kind, m.Error, s.want)
		}
	}
	if err := cc.Send(control.Msg{Kind: control.KindStart, StartAt: time.Now().UnixNano()}); err != nil {
		t.Fatal(err)
	}
	epochs := make([]uint64, maxSessions+1)
	for i := range epochs {
		epochs[i] = uint64(i + 1)
	}
	if err := cc.Send(control.Msg{Kind: control.KindCollect, Epochs: epochs}); err != nil {
		t.Fatal(err)
	}
	m := recvType(t, cc)
	if m.Kind != control.KindFindings {
		t.Fatalf("answered collect with %q %q, want findings", m.Kind, m.Error)
	}
	if n := len(m.Findings.BySender); n != 0 {
		t.Fatalf("findings for %d runs, none of which sent to the agent; want none", n)
	}
}
