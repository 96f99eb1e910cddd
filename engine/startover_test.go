package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine/journal"
	"github.com/sluicehq/sluice/engine/store"
)

// countSource reads records 0..n-1 at timestamps 0..n-1, each payload the
// record's number (8 bytes, little endian).
type countSource struct{ n, next int64 }

func (s *countSource) Start(next int64) error { s.next = next; return nil }

func (s *countSource) Read(dst []Record, limit int64) ([]Record, int64, error) {
	if s.next >= s.n {
		return dst, s.n, io.EOF
	}
	for k := 0; k < 256 && s.next < s.n && s.next < limit; k++ {
		dst = append(dst, Record{Ts: s.next, Payload: binary.LittleEndian.AppendUint64(nil, uint64(s.next))})
		s.next++
	}
	return dst, s.next, nil
}

// sumTask counts and sums the numbers it receives; its result is both.
type sumTask struct{ n, sum uint64 }

func (t *sumTask) Process(in []Message, _ *Emitter) error {
	for _, m := range in {
		t.n++
		t.sum += binary.LittleEndian.Uint64(m.Payload)
	}
	return nil
}

func (t *sumTask) Snapshot(dst []byte) ([]byte, error) {
	dst = binary.LittleEndian.AppendUint64(dst, t.n)
	return binary.LittleEndian.AppendUint64(dst, t.sum), nil
}

func (t *sumTask) Restore(b []byte) error {
	if len(b) != 16 {
		return errors.New("sumTask: bad state")
	}
	t.n, t.sum = binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])
	return nil
}

func (t *sumTask) Finish() ([]byte, error) { return t.Snapshot(nil) }

func countJob(n int64) *Job {
	return &Job{
		Procs: []Proc{
			{Name: "src", Parallelism: 1, NewSource: func(int) (Source, error) { return &countSource{n: n}, nil }},
			{Name: "sum", Parallelism: 1, NewTask: func(int) (Task, error) { return &sumTask{}, nil }},
		},
		Edges: []Edge{{From: "src", To: "sum", Partitioner: Hash}},
	}
}

// TestAResumedJobWhoseUncommittedCheckpointIsGoneStartsOverAndFinishes: a
// coordinator journaled its first checkpoint and died before it journaled
// the commit that lets sources cut their logs, so the logs still hold every
// record; while it was down the workers' copies of that checkpoint went
// missing. The package doc says the job then cannot resume from the
// checkpoint but can replay from the start of the logs, exactly once. The
// new coordinator does start over (a generation restoring nothing), but
// the journal still holds the lost checkpoint as the last completed one, so
// the first checkpoint of the new generation, which comes soon after its
// start, lies below it and its journal record is refused as out of order:
// the run ends with an error instead of the job's result.
func TestAResumedJobWhoseUncommittedCheckpointIsGoneStartsOverAndFinishes(t *testing.T) {
	const n = 20000
	const interval = 4096
	dir := filepath.Join(t.TempDir(), "data")
	job := countJob(n)

	// What the dead coordinator left: its journal (job, generation 1, the
	// first checkpoint at `interval`, no commit) and the source's log,
	// which holds the records read below the horizon, 2*interval.
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	jr, err := journal.Open(filepath.Join(dir, JournalFile), journal.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []journal.Record{
		&journal.Job{Shape: job.shape(), Nodes: 1, Placement: []int{0, 0}},
		&journal.Generation{Gen: 1, Interval: interval},
		&journal.Checkpoint{Gen: 1, Ts: interval, Interval: interval},
	} {
		if err := jr.Append(r); err != nil {
			t.Fatal(err)
		}
	}
	jr.Close()
	lg, err := store.Open(filepath.Join(dir, "node0", "log", "task-0.0"), store.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	for i := int64(0); i < 2*interval; i += 256 {
		var recs []Record
		for k := i; k < i+256; k++ {
			recs = append(recs, Record{Ts: k, Payload: binary.LittleEndian.AppendUint64(nil, uint64(k))})
		}
		if err := lg.Append(recs); err != nil {
			t.Fatal(err)
		}
	}
	if err := lg.Close(); err != nil {
		t.Fatal(err)
	}
	// node0/checkpoints holds no checkpoint: the files went missing.

	c, err := NewCoordinator(job, Config{Dir: dir, NoSync: true, InitialInterval: interval,
		CheckpointEvery: time.Hour, // the interval stays as journaled
		Restart:         RestartPolicy{MaxRestarts: NoRestarts}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a hang guard
	defer cancel()
	res, err := c.Run(ctx)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	if res.Resumed == nil || res.Resumed.Gen != 2 {
		t.Fatalf("resumed %+v, want the journal resumed with generation 2", res.Resumed)
	}
	b := res.Results["1.0"]
	if len(b) != 16 {
		t.Fatalf("sink result %x", b)
	}
	if got, sum := binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:]); got != n || sum != n*(n-1)/2 {
		t.Errorf("summed %d messages to %d, want %d to %d", got, sum, n, n*(n-1)/2)
	}
	st, err := journal.Read(filepath.Join(dir, JournalFile))
	if err != nil {
		t.Fatal(err)
	}
	if st.Gen != 2 || st.Checkpoints < 2 {
		t.Fatalf("journal after the run: %+v, want generation 2 and a checkpoint of its own", st)
	}
}
