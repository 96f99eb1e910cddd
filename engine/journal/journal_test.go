package journal

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"testing"
)

// history is a journal's worth of records: a job, three generations, the
// second restoring the first's last checkpoint, and a commit after each
// checkpoint, keeping the oldest of the last two.
func history() []Record {
	return []Record{
		&Job{Config: []byte(`{"kind":"wordcount","input":"in.txt"}`), Shape: "gen*1 split*2 count*2", Nodes: 3,
			Placement: []int{0, 1, 2, 0, 1}},
		&Generation{Gen: 1, Interval: 4096},
		&Checkpoint{Gen: 1, Ts: 4096, Interval: 8192},
		&Commit{Gen: 1, Keep: 4096},
		&Checkpoint{Gen: 1, Ts: 12288, Interval: 8192},
		&Commit{Gen: 1, Keep: 4096},
		&Generation{Gen: 2, Restore: 12288, HasRestore: true, Interval: 8192},
		&Checkpoint{Gen: 2, Ts: 20480, Interval: 2048},
		&Commit{Gen: 2, Keep: 12288},
		&Generation{Gen: 5, Restore: 20480, HasRestore: true, Interval: 2048},
	}
}

// stateOf adds up recs independently of State.apply.
func stateOf(recs []Record) State {
	var s State
	for _, r := range recs {
		switch r := r.(type) {
		case *Job:
			s.Job = r
		case *Generation:
			s.Gen, s.Interval = r.Gen, r.Interval
			s.Generations++
		case *Checkpoint:
			s.Checkpoint, s.HasCheckpoint, s.Interval = r.Ts, true, r.Interval
			s.Checkpoints++
		case *Commit:
			s.Floor, s.HasFloor = max(s.Floor, r.Keep), true
			s.Commits++
		}
	}
	return s
}

// writeJournal appends recs to a new journal at path and returns the
// offset at which each record ends.
func writeJournal(t *testing.T, path string, recs []Record) []int64 {
	t.Helper()
	j, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	ends := []int64{}
	for _, r := range recs {
		if err := j.Append(r); err != nil {
			t.Fatalf("Append(%+v): %v", r, err)
		}
		ends = append(ends, j.off)
	}
	return ends
}

func TestAReopenedJournalHoldsEveryAppendedRecordAndAcceptsMore(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	recs := history()
	writeJournal(t, path, recs)
	j, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := j.State(), stateOf(recs); !reflect.DeepEqual(got, want) {
		t.Fatalf("state after reopen\n got %+v\nwant %+v", got, want)
	}
	if j.Cut() != 0 {
		t.Fatalf("an intact journal lost %d bytes", j.Cut())
	}
	more := &Checkpoint{Gen: 5, Ts: 30000, Interval: 2048}
	if err := j.Append(more); err != nil {
		t.Fatal(err)
	}
	j.Close()
	st, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := stateOf(append(recs, more)); !reflect.DeepEqual(st, want) {
		t.Fatalf("state after an append\n got %+v\nwant %+v", st, want)
	}
}

// historyFile writes history() to a journal in dir and returns its
// records, the offset at which each ends, and the file's bytes.
func historyFile(t *testing.T, dir string) (recs []Record, ends []int64, b []byte) {
	t.Helper()
	full := filepath.Join(dir, "full")
	recs = history()
	ends = writeJournal(t, full, recs)
	b, err := os.ReadFile(full)
	if err != nil {
		t.Fatal(err)
	}
	return recs, ends, b
}

func TestAJournalCutAtAnyByteKeepsExactlyTheRecordsBeforeTheCut(t *testing.T) {
	dir := t.TempDir()
	recs, ends, b := historyFile(t, dir)
	for cut := 0; cut <= len(b); cut++ {
		path := filepath.Join(dir, "cut")
		if err := os.WriteFile(path, b[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		j, err := Open(path, Options{NoSync: true})
		if cut < len(fileMagic) {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("cut at %d, inside the file's magic: got %v, want ErrCorrupt", cut, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("cut at %d: %v", cut, err)
		}
		kept := 0
		keptEnd := int64(len(fileMagic))
		for kept < len(ends) && ends[kept] <= int64(cut) {
			keptEnd = ends[kept]
			kept++
		}
		if got, want := j.State(), stateOf(recs[:kept]); !reflect.DeepEqual(got, want) {
			t.Fatalf("cut at %d: state\n got %+v\nwant %+v", cut, got, want)
		}
		if j.Cut() != int64(cut)-keptEnd {
			t.Fatalf("cut at %d: Cut() = %d, want %d", cut, j.Cut(), int64(cut)-keptEnd)
		}
		// The torn tail is gone from the file, and the journal goes on.
		if fi, _ := os.Stat(path); fi.Size() != keptEnd {
			t.Fatalf("cut at %d: file is %d bytes after Open, want %d", cut, fi.Size(), keptEnd)
		}
		if kept < len(recs) {
			if err := j.Append(recs[kept]); err != nil {
				t.Fatalf("cut at %d: appending the lost record: %v", cut, err)
			}
		}
		j.Close()
		st, err := Read(path)
		if err != nil {
			t.Fatalf("cut at %d, after an append: %v", cut, err)
		}
		if want := stateOf(recs[:min(kept+1, len(recs))]); !reflect.DeepEqual(st, want) {
			t.Fatalf("cut at %d, after an append: state\n got %+v\nwant %+v", cut, st, want)
		}
	}
}

func TestDamageToTheLastRecordIsCutAndDamageBeforeItIsAnError(t *testing.T) {
	dir := t.TempDir()
	recs, ends, b := historyFile(t, dir)
	start := int64(len(fileMagic))
	for i, end := range ends {
		for at := start; at < end; at++ {
			bad := bytes.Clone(b)
			bad[at] ^= 0x20
			path := filepath.Join(dir, "bad")
			if err := os.WriteFile(path, bad, 0o644); err != nil {
				t.Fatal(err)
			}
			j, err := Open(path, Options{NoSync: true})
			if i == len(ends)-1 {
				if err != nil {
					t.Fatalf("byte %d of the last record flipped: %v, want the record cut", at, err)
				}
				if got, want := j.State(), stateOf(recs[:i]); !reflect.DeepEqual(got, want) {
					t.Fatalf("byte %d of the last record flipped: state\n got %+v\nwant %+v", at, got, want)
				}
				j.Close()
				continue
			}
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("byte %d of record %d flipped: got %v, want a *CorruptError", at, i, err)
			}
			if ce.Offset != start {
				t.Fatalf("byte %d of record %d flipped: error at offset %d, want %d (the record's start)", at, i, ce.Offset, start)
			}
		}
		start = end
	}
}

func TestAZeroFilledTailIsCut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	recs := history()
	writeJournal(t, path, recs)
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.Write(make([]byte, 4096)) // a crash while the file grew
	f.Close()
	j, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if got, want := j.State(), stateOf(recs); !reflect.DeepEqual(got, want) {
		t.Fatalf("state\n got %+v\nwant %+v", got, want)
	}
	if j.Cut() != 4096 {
		t.Fatalf("cut %d bytes, want 4096", j.Cut())
	}
}

func TestRecordsOutOfOrderAreRefusedOnAppendAndOnReplay(t *testing.T) {
	job := &Job{Shape: "a*1", Nodes: 1, Placement: []int{0}}
	cases := []struct {
		name string
		recs []Record
	}{
		{"a generation before the job", []Record{&Generation{Gen: 1}}},
		{"a second job", []Record{job, job}},
		{"a generation not above the last", []Record{job, &Generation{Gen: 3}, &Generation{Gen: 3}}},
		{"a checkpoint of an older generation", []Record{job, &Generation{Gen: 1}, &Generation{Gen: 2}, &Checkpoint{Gen: 1, Ts: 5}}},
		{"a checkpoint not after the last", []Record{job, &Generation{Gen: 1}, &Checkpoint{Gen: 1, Ts: 5}, &Checkpoint{Gen: 1, Ts: 5}}},
		{"a checkpoint before any generation", []Record{job, &Checkpoint{Gen: 0, Ts: 5}}},
		{"a commit before any checkpoint", []Record{job, &Generation{Gen: 1}, &Commit{Gen: 1, Keep: 0}}},
		{"a commit beyond the last checkpoint", []Record{job, &Generation{Gen: 1}, &Checkpoint{Gen: 1, Ts: 5},
			&Commit{Gen: 1, Keep: 6}}},
		{"a commit of an older generation", []Record{job, &Generation{Gen: 1}, &Checkpoint{Gen: 1, Ts: 5},
			&Generation{Gen: 2, Restore: 5, HasRestore: true}, &Commit{Gen: 1, Keep: 5}}},
		{"a generation restoring nothing after a commit", []Record{job, &Generation{Gen: 1}, &Checkpoint{Gen: 1, Ts: 5},
			&Commit{Gen: 1, Keep: 5}, &Generation{Gen: 2}}},
		{"a generation restoring a checkpoint below the floor", []Record{job, &Generation{Gen: 1},
			&Checkpoint{Gen: 1, Ts: 5}, &Checkpoint{Gen: 1, Ts: 9}, &Commit{Gen: 1, Keep: 9},
			&Generation{Gen: 2, Restore: 5, HasRestore: true}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			j, err := Open(filepath.Join(dir, "journal"), Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			last := len(c.recs) - 1
			for _, r := range c.recs[:last] {
				if err := j.Append(r); err != nil {
					t.Fatal(err)
				}
			}
			if err := j.Append(c.recs[last]); !errors.Is(err, ErrOrder) {
				t.Fatalf("Append: got %v, want ErrOrder", err)
			}
			j.Close()
			// The same records written by hand are refused at Open.
			b := []byte(fileMagic)
			for _, r := range c.recs {
				b, _ = AppendRecord(b, r)
			}
			path := filepath.Join(dir, "forged")
			os.WriteFile(path, b, 0o644)
			if _, err := Open(path, Options{NoSync: true}); !errors.Is(err, ErrOrder) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open: got %v, want ErrCorrupt and ErrOrder", err)
			}
		})
	}
}

// TestAGenerationThatRestoresNothingStartsTheCheckpointsOver: a
// coordinator that finds no checkpoint its workers all hold, the logs not
// yet cut, replays them from the start: the checkpoints before that
// generation are abandoned, and its first, which may come long before
// them, is in order.
func TestAGenerationThatRestoresNothingStartsTheCheckpointsOver(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	recs := []Record{&Job{Shape: "a*1", Nodes: 1, Placement: []int{0}}, &Generation{Gen: 1, Interval: 4096},
		&Checkpoint{Gen: 1, Ts: 4096, Interval: 4096}, &Generation{Gen: 2, Interval: 4096}}
	writeJournal(t, path, recs)
	st, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.HasCheckpoint || st.HasFloor {
		t.Fatalf("state %+v, want no checkpoint and no floor after a generation that restored none", st)
	}
	j, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	for _, r := range []Record{&Checkpoint{Gen: 2, Ts: 64, Interval: 4096}, &Commit{Gen: 2, Keep: 64}} {
		if err := j.Append(r); err != nil {
			t.Fatalf("Append(%+v): %v", r, err)
		}
	}
	if st := j.State(); st.Checkpoint != 64 || st.Floor != 64 {
		t.Fatalf("state %+v, want checkpoint 64 and floor 64", st)
	}
}

// TestAVersion1JournalThatStartedOverAfterACheckpointIsRefused: version 1
// cut the logs at every checkpoint without a record of it, so a generation
// that restored none after one has nothing to replay; there is no floor
// a version 2 journal could keep for it either.
func TestAVersion1JournalThatStartedOverAfterACheckpointIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	v1File(t, path, []Record{&Job{Shape: "a*1", Nodes: 1, Placement: []int{0}}, &Generation{Gen: 1, Interval: 10},
		&Checkpoint{Gen: 1, Ts: 20, Interval: 10}, &Generation{Gen: 2, Interval: 10}})
	before, _ := os.ReadFile(path)
	if _, err := Read(path); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Read: got %v, want ErrCorrupt", err)
	}
	if _, err := Open(path, Options{NoSync: true}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open: got %v, want ErrCorrupt", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
		t.Fatal("the refused journal was changed")
	}
}

func TestAFileThatIsNotAJournalIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	os.WriteFile(path, []byte("SLJN\x00\x00\x00\x03 a later version"), 0o644)
	if _, err := Open(path, Options{NoSync: true}); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("got %v, want ErrCorrupt", err)
	}
	if _, err := Read(filepath.Join(t.TempDir(), "none")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Read of a missing journal: got %v, want os.ErrNotExist", err)
	}
}

func TestASecondOpenOfAnOpenJournalIsRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	j, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path, Options{NoSync: true}); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: got %v, want ErrLocked", err)
	}
	j.Close()
	if err := j.Append(&Job{}); !errors.Is(err, ErrClosed) {
		t.Fatalf("Append after Close: got %v, want ErrClosed", err)
	}
	j2, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	j2.Close()
}

func TestARecordOverTheLimitIsRefused(t *testing.T) {
	j, err := Open(filepath.Join(t.TempDir(), "journal"), Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if err := j.Append(&Job{Config: make([]byte, MaxBody)}); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("got %v, want ErrTooLarge", err)
	}
	if err := j.Append(&Job{Config: make([]byte, MaxBody-100)}); err != nil {
		t.Fatalf("a record under the limit: %v", err)
	}
}

// v1File is a journal of format version 1, which had no Commit records,
// holding recs.
func v1File(t *testing.T, path string, recs []Record) {
	t.Helper()
	b := []byte(fileMagicV1)
	for _, r := range recs {
		var err error
		if b, err = AppendRecord(b, r); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestAVersion1JournalHasItsLastCheckpointAsItsFloorAndIsUpgraded: a
// journal written before commits were journaled may have had its logs cut
// up to its last checkpoint. Read says so and leaves the file alone; Open
// keeps that floor in a Commit and makes the file version 2, which an
// engine that knows only version 1 refuses; a crash between the two steps
// reads the same.
func TestAVersion1JournalHasItsLastCheckpointAsItsFloorAndIsUpgraded(t *testing.T) {
	job := &Job{Shape: "a*1", Nodes: 1, Placement: []int{0}}
	recs := []Record{job, &Generation{Gen: 1, Interval: 10}, &Checkpoint{Gen: 1, Ts: 10, Interval: 10},
		&Checkpoint{Gen: 1, Ts: 20, Interval: 10}}
	want := stateOf(recs)
	want.Floor, want.HasFloor = 20, true
	for _, c := range []struct {
		name string
		recs []Record
	}{
		{"as version 1 wrote it", recs},
		{"cut short by a crash during its upgrade", append(slices.Clone(recs), &Commit{Gen: 1, Keep: 20})},
	} {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "journal")
			v1File(t, path, c.recs)
			before, _ := os.ReadFile(path)
			st, err := Read(path)
			if err != nil {
				t.Fatal(err)
			}
			w := want
			w.Commits = len(c.recs) - len(recs)
			if !reflect.DeepEqual(st, w) {
				t.Fatalf("Read: state\n got %+v\nwant %+v", st, w)
			}
			if after, _ := os.ReadFile(path); !bytes.Equal(after, before) {
				t.Fatal("Read changed the file")
			}
			j, err := Open(path, Options{NoSync: true})
			if err != nil {
				t.Fatal(err)
			}
			defer j.Close()
			w.Commits++ // the upgrade's
			if !reflect.DeepEqual(j.State(), w) {
				t.Fatalf("Open: state\n got %+v\nwant %+v", j.State(), w)
			}
			err = j.Append(&Generation{Gen: 2, Restore: 10, HasRestore: true})
			if !errors.Is(err, ErrOrder) {
				t.Fatalf("a generation restoring checkpoint 10 below the floor 20: got %v, want ErrOrder", err)
			}
			b, _ := os.ReadFile(path)
			if !bytes.HasPrefix(b, []byte(fileMagic)) {
				t.Fatalf("the file starts %q after Open, want version 2's %q", b[:len(fileMagic)], fileMagic)
			}
			if st, err := Read(path); err != nil || !reflect.DeepEqual(st, w) {
				t.Fatalf("Read after the upgrade: %v, state\n got %+v\nwant %+v", err, st, w)
			}
		})
	}
}

func TestAVersion1JournalWithoutACheckpointHasNoFloor(t *testing.T) {
	path := filepath.Join(t.TempDir(), "journal")
	recs := []Record{&Job{Shape: "a*1", Nodes: 1, Placement: []int{0}}, &Generation{Gen: 1, Interval: 10}}
	v1File(t, path, recs)
	j, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if got, want := j.State(), stateOf(recs); !reflect.DeepEqual(got, want) {
		t.Fatalf("state\n got %+v\nwant %+v", got, want)
	}
	if err := j.Append(&Generation{Gen: 2}); err != nil {
		t.Fatalf("a generation restoring nothing, with nothing committed: %v", err)
	}
}
