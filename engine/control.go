package engine

// The control plane between the coordinator and its workers, in four
// parts: this file is the protocol (the requests and responses, one JSON
// line each across processes) and its dispatcher, [Worker.Do]; serve.go is
// a worker process's side ([ServeWorker]); handle.go is the coordinator's
// view of a worker and the in-process kind; process.go supervises workers
// in child processes.

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport"
)

// Request is one control-plane call from the coordinator to a worker. The
// same type travels as a JSON line to `loadgen node` children.
type Request struct {
	ID      uint64    `json:"id"`
	Op      string    `json:"op"` // start, run, stop, clock, checkpoint, horizon, commit, crash, finish, common, exit
	Gen     uint64    `json:"gen,omitempty"`
	Start   *StartCmd `json:"start,omitempty"`
	Persist bool      `json:"persist,omitempty"`
	Ts      int64     `json:"ts,omitempty"`
	Next    int64     `json:"next,omitempty"`
	Task    string    `json:"task,omitempty"`
	Tasks   []string  `json:"tasks,omitempty"`
}

// Response answers a Request with the same ID; a line with ID 0 carries an
// Event instead.
type Response struct {
	ID  uint64 `json:"id"`
	Err string `json:"err,omitempty"`
	// LogLost marks an Err that wraps ErrSourceLogLost: no recovery can
	// help, and the coordinator ends the run.
	LogLost bool                 `json:"log_lost,omitempty"`
	Clock   *ClockReply          `json:"clock,omitempty"`
	Results map[string][]byte    `json:"results,omitempty"`
	Faults  transport.FaultStats `json:"faults"`
	Event   *Event               `json:"event,omitempty"`
	Addr    string               `json:"addr,omitempty"` // the hello line
	// Common answers "common": the checkpoints, newest first, that every
	// task the request names has and can load.
	Common []int64 `json:"common,omitempty"`
	// InvalidJob marks an Err that wraps ErrInvalidJob (a processor's
	// constructor returned nil): no restart can help, and the coordinator
	// ends the run. A worker that predates it leaves it out.
	InvalidJob bool `json:"invalid_job,omitempty"`
}

// lacks names the field that r, a successful answer to a call of op, must
// carry and does not ("" when it has what op needs): the coordinator reads
// a clock round's Clock. A worker of another version, or a foreign process
// behind a Launcher, may leave it out.
func (r *Response) lacks(op string) string {
	if op == "clock" && r.Clock == nil {
		return "clock"
	}
	return ""
}

// Do executes one control request.
func (w *Worker) Do(req Request) Response {
	r := Response{ID: req.ID}
	var err error
	switch req.Op {
	case "start":
		if req.Start == nil {
			err = errors.New("engine: start without a command")
		} else {
			err = w.Start(*req.Start)
		}
	case "run":
		err = w.Run(req.Gen)
	case "stop":
		w.Stop()
	case "clock":
		var c ClockReply
		c, err = w.Clock(req.Gen)
		r.Clock = &c
	case "checkpoint":
		err = w.Checkpoint(req.Gen, req.Persist, req.Ts, req.Next)
	case "horizon":
		err = w.Horizon(req.Gen, req.Ts)
	case "commit":
		err = w.Commit(req.Gen, req.Ts)
	case "crash":
		var id taskid.ID
		if id, err = taskid.Parse(req.Task); err == nil {
			err = w.Crash(req.Gen, id)
		}
	case "finish":
		r.Results, err = w.Finish(req.Gen)
	case "common":
		r.Common, err = w.Common(req.Tasks)
	default:
		err = fmt.Errorf("engine: unknown control op %q", req.Op)
	}
	r.Faults = w.TransportFaults()
	if err != nil {
		r.Err, r.LogLost, r.InvalidJob = err.Error(), errors.Is(err, ErrSourceLogLost), errors.Is(err, ErrInvalidJob)
	}
	return r
}

// err is the error of a failed call: r.Err, matching ErrSourceLogLost or
// ErrInvalidJob (errors.Is) when the worker said so.
func (r *Response) err() error {
	switch {
	case r.LogLost:
		return workerError{r.Err, ErrSourceLogLost}
	case r.InvalidJob:
		return workerError{r.Err, ErrInvalidJob}
	}
	return errors.New(r.Err)
}

// workerError is an error a worker reported as text, which already says
// what its sentinel says: it matches the sentinel without repeating it.
type workerError struct {
	text string
	is   error
}

func (e workerError) Error() string { return e.text }
func (e workerError) Unwrap() error { return e.is }
