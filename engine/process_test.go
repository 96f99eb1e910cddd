package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// pipeProcess is a worker process made of pipes that the test speaks for.
type pipeProcess struct {
	inR, outR *io.PipeReader
	inW, outW *io.PipeWriter
	killed    chan struct{}
	once      sync.Once
}

func newPipeProcess() *pipeProcess {
	p := &pipeProcess{killed: make(chan struct{})}
	p.inR, p.inW = io.Pipe()
	p.outR, p.outW = io.Pipe()
	return p
}

func (p *pipeProcess) Stdin() io.WriteCloser { return p.inW }
func (p *pipeProcess) Stdout() io.Reader     { return p.outR }
func (p *pipeProcess) Kill() error {
	p.once.Do(func() {
		close(p.killed)
		p.outW.Close()
		p.inR.Close()
	})
	return nil
}
func (p *pipeProcess) Wait() string { <-p.killed; return "killed" }

// TestANodeThatBreaksTheControlProtocolIsKilledAndReported: a worker
// process that answers a request with a line that is not a response is
// killed; the call waiting for its answer fails at once, and the node's
// death is reported with the line that broke the protocol.
func TestANodeThatBreaksTheControlProtocolIsKilledAndReported(t *testing.T) {
	for name, line := range map[string]string{
		"not JSON":        "panic: something the worker printed\n",
		"a JSON fragment": `{"id":1,"err":` + "\n",
	} {
		t.Run(name, func(t *testing.T) {
			proc := newPipeProcess()
			events := make(chan Event, 4)
			launch := func(context.Context, int, string) (WorkerProcess, error) { return proc, nil }
			go io.WriteString(proc.outW, `{"addr":"127.0.0.1:9"}`+"\n")
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			h, err := newProcessHandle(ctx, launch, 2, events)
			if err != nil {
				t.Fatal(err)
			}
			if h.addr() != "127.0.0.1:9" {
				t.Fatalf("address %q from the hello line", h.addr())
			}
			go func() { // the node reads the request and answers with the line
				if _, err := bufio.NewReader(proc.inR).ReadBytes('\n'); err == nil {
					io.WriteString(proc.outW, line)
				}
			}()
			_, err = h.do(ctx, Request{Op: "clock"})
			if err == nil || ctx.Err() != nil {
				t.Fatalf("the call returned %v (context: %v), want the node's exit at once", err, ctx.Err())
			}
			select {
			case <-proc.killed:
			default:
				t.Fatal("the node was not killed")
			}
			select {
			case ev := <-events:
				if ev.Node != 2 || !strings.Contains(ev.Err, "broke the control protocol") || !strings.Contains(ev.Err, fmt.Sprintf("%q", strings.TrimSpace(line))) {
					t.Fatalf("event %+v: want node 2's death, naming the line", ev)
				}
			case <-ctx.Done():
				t.Fatal("the node's death was not reported")
			}
			if h.alive() {
				t.Fatal("the handle still says the node is alive")
			}
		})
	}
}

// TestANodeWhoseFirstLineIsNoHelloIsRefusedWithAShortReason: a worker
// whose first line is not a hello (a megabyte of binary output, say) is
// refused with a reason that quotes the start of the line, not all of it:
// quoted whole, the line made an error of four megabytes, and a line up to
// maxWorkerLine one of a gigabyte.
func TestANodeWhoseFirstLineIsNoHelloIsRefusedWithAShortReason(t *testing.T) {
	proc := newPipeProcess()
	launch := func(context.Context, int, string) (WorkerProcess, error) { return proc, nil }
	go io.WriteString(proc.outW, strings.Repeat("\xff", 1<<20)+"\n")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := newProcessHandle(ctx, launch, 2, make(chan Event, 4))
	if err == nil || ctx.Err() != nil {
		t.Fatalf("newProcessHandle: %v (context: %v), want the node refused at once", err, ctx.Err())
	}
	if msg := err.Error(); len(msg) > 1<<10 || !strings.Contains(msg, "node 2") || !strings.Contains(msg, "instead of hello") || !strings.Contains(msg, `\xff\xff`) {
		t.Fatalf("the refusal is %d bytes long, want at most 1 KiB naming the node and quoting the line's start: %.300q", len(msg), msg)
	}
}

// serve plays a worker on p: it says hello, then answers every request
// with the line answer makes, until its stdin ends; then it exits.
func (p *pipeProcess) serve(answer func(Request) string) {
	go func() {
		defer p.Kill()
		if _, err := io.WriteString(p.outW, `{"addr":"127.0.0.1:9"}`+"\n"); err != nil {
			return
		}
		sc := bufio.NewScanner(p.inR)
		for sc.Scan() {
			var req Request
			if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
				return
			}
			if _, err := io.WriteString(p.outW, answer(req)+"\n"); err != nil {
				return
			}
		}
	}()
}

// TestAClockAnswerWithoutAClockFailsTheCallNotTheCoordinator: a worker
// (of another version, say) that answers the coordinator's clock round
// with {"id":N} and nothing else fails that call, naming the node and the
// missing field; the coordinator recovers as from any failed call, and
// ends with ErrRestartsExhausted once the policy is spent. It used to
// dereference the missing clock and panic.
func TestAClockAnswerWithoutAClockFailsTheCallNotTheCoordinator(t *testing.T) {
	job := &Job{Procs: []Proc{{Name: "src", Parallelism: 1,
		NewSource: func(int) (Source, error) { return nil, errors.New("the fake worker runs no source") }}}}
	var launched atomic.Int32
	launch := func(context.Context, int, string) (WorkerProcess, error) {
		launched.Add(1)
		p := newPipeProcess()
		p.serve(func(req Request) string { return fmt.Sprintf(`{"id":%d}`, req.ID) })
		return p, nil
	}
	c, err := NewCoordinator(job, Config{Dir: t.TempDir(), NoSync: true, Launch: launch,
		Restart: RestartPolicy{MaxRestarts: 1, MinBackoff: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang guard
	defer cancel()
	_, err = c.Run(ctx)
	if !errors.Is(err, ErrRestartsExhausted) {
		t.Fatalf("run ended with %v, want ErrRestartsExhausted", err)
	}
	if want := `node 0 broke the control protocol: its answer to clock has no "clock" field`; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
	// A failed call is not a dead node: the worker was launched once.
	if n := launched.Load(); n != 1 {
		t.Errorf("the worker was launched %d times, want 1", n)
	}
}

// TestARunEndsAtOnceWhenASourceLogIsLost: a worker that says a source log
// may have lost records (its fsync or close failed) ends the run at once
// with ErrSourceLogLost, without a recovery: a replay from that log could
// not be trusted.
func TestARunEndsAtOnceWhenASourceLogIsLost(t *testing.T) {
	job := &Job{Procs: []Proc{{Name: "src", Parallelism: 1,
		NewSource: func(int) (Source, error) { return nil, errors.New("the fake worker runs no source") }}}}
	launch := func(context.Context, int, string) (WorkerProcess, error) {
		p := newPipeProcess()
		p.serve(func(req Request) string {
			if req.Op == "start" {
				return fmt.Sprintf(`{"id":%d,"err":"engine: worker refuses to start: store: fsync: input/output error","log_lost":true}`, req.ID)
			}
			return fmt.Sprintf(`{"id":%d,"latest_ts":0}`, req.ID)
		})
		return p, nil
	}
	n, err := runCountingRecoveries(t, job, Config{Launch: launch, Restart: RestartPolicy{MaxRestarts: 100, MinBackoff: time.Millisecond}})
	if !errors.Is(err, ErrSourceLogLost) || !strings.Contains(err.Error(), "input/output error") {
		t.Fatalf("run ended with %v, want ErrSourceLogLost naming the worker's error", err)
	}
	if n != 0 {
		t.Errorf("%d recoveries, want none", n)
	}
}

// TestARunEndsWhenItsWorkersReportMoreFailuresThanItReads: a generation
// in which hundreds of tasks fail at once (a bad record broadcast to every
// task of a wide processor) has its workers report more failures than the
// coordinator's queue of events holds, and the run ends at the first. The
// handle of a worker process went on reading the worker's lines and
// blocked handing the next event to a queue nobody read any more; then it
// never read the worker's exit, and Run, waiting for it, never returned.
func TestARunEndsWhenItsWorkersReportMoreFailuresThanItReads(t *testing.T) {
	job := &Job{Procs: []Proc{{Name: "src", Parallelism: 1,
		NewSource: func(int) (Source, error) { return nil, errors.New("the fake worker runs no source") }}}}
	launch := func(context.Context, int, string) (WorkerProcess, error) {
		p := newPipeProcess()
		p.serve(func(req Request) string {
			if req.Op == "run" {
				go func() { // each failure its own line, beside the answers
					for i := range 512 {
						line := fmt.Sprintf(`{"id":0,"event":{"gen":%d,"task":"1.%d","err":"bad record"}}`+"\n", req.Gen, i)
						if _, err := io.WriteString(p.outW, line); err != nil {
							return
						}
					}
				}()
			}
			return fmt.Sprintf(`{"id":%d}`, req.ID)
		})
		return p, nil
	}
	c, err := NewCoordinator(job, Config{Dir: t.TempDir(), NoSync: true, Launch: launch, Restart: RestartPolicy{MaxRestarts: NoRestarts}})
	if err != nil {
		t.Fatal(err)
	}
	if cap(c.events) >= 512 {
		t.Fatalf("the coordinator queues %d events; the test must send more", cap(c.events))
	}
	done := make(chan error, 1)
	go func() {
		_, err := c.Run(context.Background())
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrRestartsExhausted) || !strings.Contains(err.Error(), "bad record") {
			t.Fatalf("run ended with %v, want ErrRestartsExhausted naming the failure", err)
		}
	case <-time.After(60 * time.Second): // a hang guard
		t.Fatal("Run did not return after the first failure")
	}
}

// TestARunEndsAtOnceWhenAWorkerReportsASourceLogLostAsAnEvent: a source
// whose log refuses an Append because an fsync of it failed (in the
// background, say) reports it as an event marked log_lost, not as the
// answer to a call. The coordinator must end the run at once with
// ErrSourceLogLost, without a recovery, even with NoRestarts: it used to
// read the event as a plain task failure, so the run ended with
// ErrRestartsExhausted, which errors.Is(err, ErrSourceLogLost) does not
// match.
func TestARunEndsAtOnceWhenAWorkerReportsASourceLogLostAsAnEvent(t *testing.T) {
	job := &Job{Procs: []Proc{{Name: "src", Parallelism: 1,
		NewSource: func(int) (Source, error) { return nil, errors.New("the fake worker runs no source") }}}}
	launch := func(context.Context, int, string) (WorkerProcess, error) {
		p := newPipeProcess()
		p.serve(func(req Request) string {
			switch req.Op {
			case "run": // the answer, then the source's failure
				return fmt.Sprintf(`{"id":%d}`+"\n"+`{"id":0,"event":{"gen":%d,"task":"0.0","err":"engine: a source log may have lost records: store: background fsync: input/output error","log_lost":true}}`, req.ID, req.Gen)
			case "clock":
				return fmt.Sprintf(`{"id":%d,"clock":{"gen":%d,"min":0}}`, req.ID, req.Gen)
			}
			return fmt.Sprintf(`{"id":%d}`, req.ID)
		})
		return p, nil
	}
	n, err := runCountingRecoveries(t, job, Config{Launch: launch, Restart: RestartPolicy{MaxRestarts: NoRestarts}})
	if !errors.Is(err, ErrSourceLogLost) || !strings.Contains(err.Error(), "background fsync: input/output error") {
		t.Fatalf("run ended with %v, want ErrSourceLogLost naming the worker's error", err)
	}
	if n != 0 {
		t.Errorf("%d recoveries, want none", n)
	}
}

// runCountingRecoveries runs job with cfg, in a directory of its own and
// without fsyncs, for at most a minute (a hang guard), and returns how
// many recoveries it made and the error that ended it.
func runCountingRecoveries(t *testing.T, job *Job, cfg Config) (int32, error) {
	t.Helper()
	var recoveries atomic.Int32
	cfg.Dir, cfg.NoSync = t.TempDir(), true
	cfg.OnEvent = func(kind, _ string) {
		if kind == "recovery" {
			recoveries.Add(1)
		}
	}
	c, err := NewCoordinator(job, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = c.Run(ctx)
	return recoveries.Load(), err
}

// TestANodeWhoseTasksFailByTheHundredStillAnswersCalls: a node whose
// tasks all fail in one generation (a bad record broadcast to a wide
// processor) reports more failures before its answer to the recovery's
// "stop" than the coordinator's queue of events holds, and nobody reads
// that queue while the recovery calls the nodes. The handle passes on the
// first failure of the generation, and the one that marks a lost log,
// and the call gets its answer. It used to block handing the second
// failure to the full queue, reading no answer: the call, and the
// recovery, waited out callTimeout (a minute) on every node.
func TestANodeWhoseTasksFailByTheHundredStillAnswersCalls(t *testing.T) {
	proc := newPipeProcess()
	launch := func(context.Context, int, string) (WorkerProcess, error) { return proc, nil }
	proc.serve(func(req Request) string {
		var b strings.Builder
		for i := range 300 {
			fmt.Fprintf(&b, `{"id":0,"event":{"gen":1,"task":"1.%d","err":"bad record"}}`+"\n", i)
		}
		fmt.Fprintf(&b, `{"id":0,"event":{"gen":1,"task":"0.0","err":"lost","log_lost":true}}`+"\n")
		fmt.Fprintf(&b, `{"id":%d}`, req.ID)
		return b.String()
	})
	// The coordinator's queue, which the test does not read during the call.
	events := make(chan Event, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second) // a hang guard, far beyond any wait
	defer cancel()
	h, err := newProcessHandle(ctx, launch, 0, events)
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	if _, err := h.do(ctx, Request{Op: "stop"}); err != nil {
		t.Fatalf("the stop call ended with %v, want its answer", err)
	}
	if ev := <-events; ev.Task != "1.0" || ev.LogLost {
		t.Errorf("first event %+v, want the generation's first failure", ev)
	}
	if ev := <-events; ev.Task != "0.0" || !ev.LogLost {
		t.Errorf("second event %+v, want the lost log", ev)
	}
}
