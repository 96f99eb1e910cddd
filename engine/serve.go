package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
)

// ServeWorker runs w's side of the control plane: requests as JSON lines on
// in, responses and events as JSON lines on out (the first line says the
// worker's transport address). It returns, after closing w, when in ends,
// an "exit" request arrives, or ctx is done (with ctx's error), whether a
// request is on its way or not. When ctx ends, or in ends or breaks, the
// running generation is aborted as a "stop" request aborts it, so that a
// control call in progress (one that waits on a task waiting for credit,
// say) ends at once; it is answered before ServeWorker returns.
//
// in is read on a goroutine of its own, which a return on ctx or "exit"
// leaves inside in's Read until that returns: the caller that wants it gone
// closes in (a process that exits need not).
func ServeWorker(ctx context.Context, w *Worker, in io.Reader, out io.Writer) error {
	defer w.Close()
	var mu sync.Mutex
	enc := json.NewEncoder(out)
	send := func(r Response) error {
		mu.Lock()
		defer mu.Unlock()
		return enc.Encode(r)
	}
	if err := send(Response{Addr: w.Addr()}); err != nil {
		return err
	}
	// A control call can wait on the generation until it stops, and once
	// ctx ends no coordinator will stop it.
	defer context.AfterFunc(ctx, w.abort)()
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case ev := <-w.Events():
				_ = send(Response{Event: &ev})
			case <-done:
				return
			}
		}
	}()
	// Requests are read beside their execution, so that a stop aborts the
	// running generation at once: a control call can wait on a task that
	// waits for credit from a node that died, until the generation stops.
	reqs := make(chan Request, 64)
	var readErr error
	// Once in has ended (the coordinator closed it or died) or broke, no
	// coordinator will stop the generation: it is aborted, as a "stop"
	// aborts it, so that a call waiting on it ends and ServeWorker
	// returns. The requests read before are still answered; one that
	// starts a generation after the end finds it aborted too.
	var inEnded atomic.Bool
	go func() {
		defer close(reqs)
		defer func() {
			inEnded.Store(true)
			w.abort()
		}()
		sc := bufio.NewScanner(in)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		for sc.Scan() {
			var req Request
			if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
				readErr = fmt.Errorf("engine: control line: %w", err)
				return
			}
			if req.Op == "stop" || req.Op == "exit" {
				w.abort()
			}
			select {
			case reqs <- req:
			case <-done:
				return
			}
		}
		readErr = sc.Err()
	}()
	for {
		var req Request
		var ok bool
		select {
		case <-ctx.Done():
			return ctx.Err()
		case req, ok = <-reqs:
		}
		if !ok {
			return readErr
		}
		if req.Op == "exit" {
			_ = send(Response{ID: req.ID})
			return nil
		}
		r := w.Do(req)
		if inEnded.Load() {
			w.abort()
		}
		if err := send(r); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
}
