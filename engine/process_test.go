package engine

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
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
