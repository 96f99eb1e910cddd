package engine

import (
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/engine/clock"
	"github.com/sluicehq/sluice/engine/store"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport"
)

// taskRun is one generation of a processor or sink task. Its handler runs
// on the transport's goroutine for the task; mu serializes it with the
// worker's control calls (checkpoint, finish, stop).
type taskRun struct {
	inc  *incarnation
	id   taskid.ID
	out  *outputs
	sink bool

	crash atomic.Bool

	mu        sync.Mutex
	task      Task
	state     Stateful // task as Stateful, nil if stateless
	ckpt      Task     // the checkpoint copy: messages with Ts < target, once copied
	ckptState Stateful
	// copied says the checkpoint copy is in use. Until a message at or
	// beyond target arrives, the current state holds only messages below
	// target, so it is the checkpoint state and the copy is left stale
	// instead of processing every message a second time; the first run
	// that reaches target copies the state over before it is processed.
	copied    bool
	restore   int64 // the restore filter: messages below were in the checkpoint
	target    int64 // the next checkpoint time
	persisted int64 // the last checkpoint persisted; arrivals below it are late
	stopped   bool
	failed    bool
	msgs      []Message
	below     []Message
	buf       []byte
	save      []byte // the snapshot being persisted; only checkpoint, serialized by the worker, uses it
}

func (t *taskRun) handle(msgs []transport.Message) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.stopped || t.failed || t.inc.ctx.Err() != nil {
		return
	}
	defer func() {
		if r := recover(); r != nil {
			t.failLocked(fmt.Errorf("panic: %v", r))
		}
	}()
	if err := t.processLocked(msgs); err != nil {
		t.failLocked(err)
	}
}

func (t *taskRun) failLocked(err error) {
	t.failed = true
	t.out.fail()
	t.inc.failed(t.id, err)
}

func (t *taskRun) processLocked(msgs []transport.Message) error {
	w := t.inc.w
	in := t.msgs[:0]
	var filtered, late int64
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for _, m := range msgs {
		if m.Ts < t.restore {
			filtered++
			continue
		}
		dm, err := decodeMessage(m.Ts, m.Payload)
		if err != nil {
			return err
		}
		if m.Ts < t.persisted {
			late++
		}
		lo, hi = min(lo, m.Ts), max(hi, m.Ts)
		in = append(in, dm)
	}
	t.msgs = in
	if filtered > 0 {
		w.filtered.Add(filtered)
	}
	if late > 0 {
		w.late.Add(late)
	}
	if t.crash.Swap(false) {
		w.crashes.Add(1)
		panic(fmt.Sprintf("engine: injected crash of task %v", t.id))
	}
	if len(in) == 0 {
		return nil
	}
	if t.ckpt != nil && !t.copied {
		for _, m := range in {
			if m.Ts >= t.target {
				if err := t.copyState(); err != nil {
					return err
				}
				t.copied = true
				break
			}
		}
	}
	t.out.em.bound(lo, hi)
	err := t.task.Process(in, &t.out.em)
	if stray, strayed := t.out.em.unbound(); err == nil && strayed {
		err = fmt.Errorf("engine: task %v emitted a message with timestamp %d while processing inputs of %d to %d: "+
			"each output must have the timestamp of the input that caused it, or recovery loses it", t.id, stray, lo, hi)
	}
	if err != nil {
		return err
	}
	if t.copied {
		below := t.below[:0]
		for _, m := range in {
			if m.Ts < t.target {
				below = append(below, m)
			}
		}
		t.below = below
		if len(below) > 0 {
			if err := t.ckpt.Process(below, discard); err != nil {
				return fmt.Errorf("checkpoint copy: %w", err)
			}
		}
	}
	if _, err := t.out.flush(t.inc.ctx, math.MinInt64); err != nil {
		if t.inc.ctx.Err() != nil {
			return nil
		}
		return err
	}
	if t.sink {
		w.processed.Add(int64(len(in)))
	}
	return nil
}

// copyState makes the checkpoint copy equal to the current state.
func (t *taskRun) copyState() error {
	b, err := t.state.Snapshot(t.buf[:0])
	if err != nil {
		return fmt.Errorf("engine: snapshot of %v: %w", t.id, err)
	}
	t.buf = b
	if err := t.ckptState.Restore(b); err != nil {
		return fmt.Errorf("engine: copying the state of %v: %w", t.id, err)
	}
	return nil
}

func (t *taskRun) checkpoint(persist bool, tc, next int64) error {
	t.mu.Lock()
	if t.failed {
		t.mu.Unlock()
		return fmt.Errorf("engine: task %v has failed", t.id)
	}
	if t.state == nil {
		t.mu.Unlock()
		return nil
	}
	if persist {
		st := t.state // holds only messages below tc
		if t.copied {
			st = t.ckptState
		}
		b, err := st.Snapshot(t.save[:0])
		if err != nil {
			t.mu.Unlock()
			return fmt.Errorf("engine: snapshot of %v: %w", t.id, err)
		}
		t.save = b
	}
	// No message at or beyond next exists yet: the current state is the
	// checkpoint state for next.
	t.copied = false
	t.target = next
	t.mu.Unlock()
	if !persist {
		return nil
	}
	// Written without the lock, so that the task (and, chained, its
	// sources) goes on with messages beyond tc while the file is fsynced;
	// the coordinator raises the horizon only once every Save returned.
	if err := t.inc.w.ckpts.Save(ckptName(t.id), tc, t.save); err != nil {
		return err
	}
	t.mu.Lock()
	t.persisted = tc
	t.mu.Unlock()
	return nil
}

// sourceRun is one generation of a source task, on its own goroutine.
type sourceRun struct {
	inc     *incarnation
	id      taskid.ID
	log     *store.Log
	out     *outputs
	restore int64

	crash         atomic.Bool
	pendingDelete atomic.Int64

	// A deletion of old log segments (unlinks and a directory fsync, tens
	// of milliseconds under write-back) runs beside the source, one at a
	// time; deleting is done, with its error in deleteErr.
	deleting  sync.WaitGroup
	deleteErr atomic.Pointer[error]
	deleteOn  atomic.Bool

	mu   sync.Mutex // guards src against Finish
	src  Source
	recs []Record
}

func (s *sourceRun) run() {
	defer s.inc.wg.Done()
	defer func() {
		if r := recover(); r != nil {
			s.out.fail()
			s.inc.failed(s.id, fmt.Errorf("panic: %v", r))
		}
	}()
	if err := s.loop(); err != nil && s.inc.ctx.Err() == nil {
		s.out.fail()
		s.inc.failed(s.id, err)
	}
}

func (s *sourceRun) checkCrash() {
	if s.crash.Swap(false) {
		s.inc.w.crashes.Add(1)
		panic(fmt.Sprintf("engine: injected crash of source %v", s.id))
	}
}

// emit sends recs (already in the log) and reports low.
func (s *sourceRun) emit(recs []Record, low int64) error {
	for _, r := range recs {
		s.out.em.Emit(r.Ts, nil, r.Payload)
	}
	_, err := s.out.flush(s.inc.ctx, low)
	return err
}

func (s *sourceRun) deleteBefore(ts int64) {
	defer s.deleting.Done()
	defer s.deleteOn.Store(false)
	if _, err := s.log.DeleteBefore(ts); err != nil && !errors.Is(err, store.ErrClosed) {
		s.deleteErr.Store(&err)
	}
}

func (s *sourceRun) loop() error {
	ctx := s.inc.ctx
	next := int64(0)
	if s.restore != math.MinInt64 {
		next = max(s.restore, 0)
	}
	// Replay what the log holds from the checkpoint on, below the horizon.
	err := s.log.Replay(s.restore, func(recs []Record) error {
		waiting := false
		for len(recs) > 0 {
			s.checkCrash()
			h := s.inc.horizon.Load()
			n := 0
			for n < len(recs) && recs[n].Ts < h {
				n++
			}
			if n == 0 {
				// Nothing is below the horizon: the source's clock is the
				// next record's time, which may be far past the last one
				// replayed (sparse timestamps). Reporting less would hold
				// the global clock below the checkpoint that raises the
				// horizon, and the replay would wait for ever.
				if !waiting {
					if _, err := s.out.flush(ctx, recs[0].Ts); err != nil {
						return err
					}
					waiting = true
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(time.Millisecond):
				}
				continue
			}
			if err := s.emit(recs[:n], recs[n-1].Ts+1); err != nil {
				return err
			}
			next = recs[n-1].Ts + 1
			recs = recs[n:]
			waiting = false
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	s.mu.Lock()
	err = s.src.Start(next)
	s.mu.Unlock()
	if err != nil {
		return err
	}
	for {
		if ctx.Err() != nil {
			return nil
		}
		s.checkCrash()
		if p := s.deleteErr.Load(); p != nil {
			return *p
		}
		if !s.deleteOn.Load() {
			if d := s.pendingDelete.Swap(math.MinInt64); d != math.MinInt64 {
				s.deleteOn.Store(true)
				s.deleting.Add(1)
				go s.deleteBefore(d)
			}
		}
		h := s.inc.horizon.Load()
		s.mu.Lock()
		recs, low, err := s.src.Read(s.recs[:0], h)
		s.mu.Unlock()
		s.recs = recs
		eof := err == io.EOF
		if err != nil && !eof {
			return err
		}
		for _, r := range recs {
			if r.Ts >= h {
				// A stateful task would take it into the checkpoint at h,
				// which the logs replay from: after a recovery to that
				// checkpoint it would be counted twice.
				return fmt.Errorf("engine: source %v read a record with timestamp %d, at or beyond the limit %d it was given: "+
					"a source reads only below its limit, or recovery repeats the record", s.id, r.Ts, h)
			}
		}
		if len(recs) > 0 {
			if err := s.inc.w.appendLog(s.log, recs); err != nil {
				if errors.Is(err, store.ErrSyncFailed) {
					// An fsync of the log failed (a background one, or
					// the one sealing a segment): it refuses every later
					// Append, Sync and Open, so no recovery can replay it.
					err = s.inc.w.errLogLost(s.id, s.log, "appending to it after an fsync of it failed", err)
				}
				return err
			}
		}
		if eof {
			low = clock.Idle
		}
		if err := s.emit(recs, low); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		if eof {
			<-ctx.Done()
			return nil
		}
		if len(recs) == 0 {
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(200 * time.Microsecond):
			}
		}
	}
}
