// Package journal is the engine coordinator's append-only journal: the
// decisions it must not forget when its process dies, so that a coordinator
// started again on the same directory resumes the job instead of starting
// over.
//
// A journal holds, in order: one [Job] (what runs: the caller's config,
// the DAG's shape, the number of workers and the task placement), then a
// [Generation] before each generation starts, a [Checkpoint] each time
// every worker has persisted one, and a [Commit] each time the coordinator
// lets the sources delete what the checkpoints still restorable no longer
// need. [Journal.Append] writes and fsyncs a record before it returns, and
// the coordinator acts on a decision only after it is journaled: a
// generation's channels use its number as their epoch only once it is on
// disk, and sources delete log segments only once the Commit that lets them
// is. Replaying the journal gives a [State]: the job, the highest
// generation ever started (a resumed coordinator starts a higher one, so
// the transport fences off whatever an older one still sends), the last
// completed checkpoint (where it resumes) and the floor the source logs
// may have been cut to (no checkpoint older than it can be resumed from).
//
// Records are CRC-framed (internal/crcframe; the layout is in format.go).
// [Open] cuts a torn tail, a damaged record that no intact record follows
// (what a crash during an append leaves), and refuses damage anywhere
// before it with a [*CorruptError]. The journal file is locked while open,
// so that two coordinators never share a directory.
package journal

import (
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"

	"github.com/sluicehq/sluice/internal/durable"
)

// State is what a journal's records add up to.
type State struct {
	// Job is the journal's job; nil for an empty journal.
	Job *Job
	// Gen is the highest generation journaled (0: none).
	Gen uint64
	// Checkpoint is, if HasCheckpoint, the last completed checkpoint the
	// job stands on: the latest generation's last, or the one it restored
	// when that is older; none after a generation that restored none.
	Checkpoint    int64
	HasCheckpoint bool
	// Interval is the checkpoint interval of the last record that set
	// one (0: none).
	Interval int64
	// Floor is, if HasFloor, what the source logs may have been cut to:
	// the highest Keep of the journal's commits, or for a version 1
	// journal, which did not record its commits, its last checkpoint
	// (its coordinator committed none later). Records below it may be
	// gone, so the job can resume only from a checkpoint at or after it.
	Floor    int64
	HasFloor bool
	// Generations, Checkpoints and Commits count the records of each
	// kind.
	Generations, Checkpoints, Commits int
}

// ErrOrder is wrapped by the errors of records that break the journal's
// rules: a Job first and only once; generations increasing, each, once a
// commit has set the floor, restoring a checkpoint at or after it; a
// checkpoint in the latest generation and later than the one before (or
// than the older one its generation restored, when it fell back to one;
// any, when its generation restored none);
// a commit in the latest generation, keeping a checkpoint no later than
// the last completed one.
var ErrOrder = errors.New("journal: record out of order")

// apply adds r to s, or says why r may not follow s.
func (s *State) apply(r Record) error {
	if s.Job == nil && r.Kind() != KindJob {
		return fmt.Errorf("%w: a %T before the job", ErrOrder, r)
	}
	switch r := r.(type) {
	case *Job:
		if s.Job != nil {
			return fmt.Errorf("%w: a second job record", ErrOrder)
		}
		s.Job = r
	case *Generation:
		if r.Gen <= s.Gen {
			return fmt.Errorf("%w: generation %d after generation %d", ErrOrder, r.Gen, s.Gen)
		}
		if s.HasFloor && (!r.HasRestore || r.Restore < s.Floor) {
			what := "no checkpoint"
			if r.HasRestore {
				what = fmt.Sprintf("checkpoint %d", r.Restore)
			}
			return fmt.Errorf("%w: generation %d restores %s, but the logs may keep records only from %d on",
				ErrOrder, r.Gen, what, s.Floor)
		}
		s.Gen, s.Generations = r.Gen, s.Generations+1
		if r.Interval > 0 {
			s.Interval = r.Interval
		}
		if !r.HasRestore {
			// It starts over from the start of the logs (no checkpoint
			// the workers hold is left, and no commit has cut the logs):
			// the checkpoints before it are abandoned, and the ones that
			// follow count from nothing.
			s.Checkpoint, s.HasCheckpoint = 0, false
		}
		if r.HasRestore && (!s.HasCheckpoint || r.Restore < s.Checkpoint) {
			// It restores an older checkpoint than the last completed one
			// (a worker's copy of that one was found corrupt): from here
			// on the state the job stands on is the older one, and the
			// checkpoints that follow count from it.
			s.Checkpoint, s.HasCheckpoint = r.Restore, true
		}
	case *Checkpoint:
		if s.Generations == 0 || r.Gen != s.Gen {
			return fmt.Errorf("%w: a checkpoint of generation %d while generation %d runs", ErrOrder, r.Gen, s.Gen)
		}
		if s.HasCheckpoint && r.Ts <= s.Checkpoint {
			return fmt.Errorf("%w: checkpoint %d after checkpoint %d", ErrOrder, r.Ts, s.Checkpoint)
		}
		s.Checkpoint, s.HasCheckpoint, s.Checkpoints = r.Ts, true, s.Checkpoints+1
		if r.Interval > 0 {
			s.Interval = r.Interval
		}
	case *Commit:
		if s.Generations == 0 || r.Gen != s.Gen {
			return fmt.Errorf("%w: a commit of generation %d while generation %d runs", ErrOrder, r.Gen, s.Gen)
		}
		if !s.HasCheckpoint || r.Keep > s.Checkpoint {
			last := "none"
			if s.HasCheckpoint {
				last = fmt.Sprint(s.Checkpoint)
			}
			return fmt.Errorf("%w: a commit keeping checkpoint %d, the last completed is %s", ErrOrder, r.Keep, last)
		}
		s.Commits++
		if !s.HasFloor || r.Keep > s.Floor {
			s.Floor, s.HasFloor = r.Keep, true
		}
	}
	return nil
}

// CorruptError is a journal whose damage is not a torn tail. It wraps
// ErrCorrupt, and the error that found the damage.
type CorruptError struct {
	Path   string
	Offset int64
	Err    error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("journal: %s is corrupt at byte %d: %v", e.Path, e.Offset, e.Err)
}

// Unwrap returns ErrCorrupt and the cause.
func (e *CorruptError) Unwrap() []error { return []error{ErrCorrupt, e.Err} }

// ErrLocked means another process (or another Journal in this one) has
// the journal open.
var ErrLocked = errors.New("journal: in use by another coordinator")

// ErrClosed is returned by a closed Journal.
var ErrClosed = errors.New("journal: closed")

// Options configure [Open].
type Options struct {
	// NoSync skips fsyncs (tests).
	NoSync bool
}

// Journal is an open journal file. It is not safe for concurrent use.
type Journal struct {
	f     *os.File
	path  string
	opts  Options
	off   int64 // where the next record goes
	state State
	cut   int64 // bytes of torn tail cut at Open
	buf   []byte
	err   error // a failed append leaves the journal unusable
}

// Open opens the journal at path, creating an empty one if there is none,
// replays it, and cuts a torn tail. It fails with a *CorruptError if the
// file is not a journal or is damaged before its tail, and with ErrLocked
// if another Journal has it open.
func Open(path string, opts Options) (*Journal, error) {
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		if err := create(path, opts); err != nil {
			return nil, err
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s", ErrLocked, path)
		}
		return nil, fmt.Errorf("journal: locking %s: %w", path, err)
	}
	j := &Journal{f: f, path: path, opts: opts}
	if err := j.load(); err != nil {
		f.Close()
		return nil, err
	}
	return j, nil
}

// create writes a journal holding only its magic, atomically: a crash
// leaves either no journal or an empty one.
func create(path string, opts Options) error {
	err := durable.WriteFile(path, !opts.NoSync, func(w io.Writer) error {
		_, err := io.WriteString(w, fileMagic)
		return err
	})
	if err != nil {
		return fmt.Errorf("journal: creating %s: %w", path, err)
	}
	return nil
}

// load replays the file into j.state, cuts a torn tail and upgrades a
// version 1 journal.
func (j *Journal) load() error {
	b, err := os.ReadFile(j.path)
	if err != nil {
		return err
	}
	st, off, v1, err := replay(j.path, b)
	if err != nil {
		return err
	}
	j.state, j.off = st, int64(off)
	if j.cut = int64(len(b) - off); j.cut > 0 {
		if err := j.f.Truncate(j.off); err != nil {
			return fmt.Errorf("journal: cutting the torn tail of %s: %w", j.path, err)
		}
		if err := j.sync(); err != nil {
			return err
		}
	}
	if v1 {
		return j.upgrade()
	}
	return nil
}

// upgrade makes a version 1 journal a version 2 one: it appends the floor
// version 1 implies as a Commit, so that the floor outlives the version,
// then rewrites the version. A crash between the two leaves a version 1
// journal ending in that Commit, which replays to the same floor.
func (j *Journal) upgrade() error {
	if st := j.state; st.HasFloor {
		if err := j.Append(&Commit{Gen: st.Gen, Keep: st.Floor}); err != nil {
			return fmt.Errorf("journal: upgrading %s to version 2: %w", j.path, err)
		}
	}
	if _, err := j.f.WriteAt([]byte(fileMagic), 0); err != nil {
		return fmt.Errorf("journal: upgrading %s to version 2: %w", j.path, err)
	}
	return j.sync()
}

// replay adds up the records of file b and returns where its valid part
// ends: len(b), or the start of a torn tail; v1 says b is a version 1
// journal, whose floor is its last checkpoint.
func replay(path string, b []byte) (st State, end int, v1 bool, err error) {
	switch {
	case len(b) >= len(fileMagic) && string(b[:len(fileMagic)]) == fileMagic:
	case len(b) >= len(fileMagicV1) && string(b[:len(fileMagicV1)]) == fileMagicV1:
		v1 = true
	default:
		return st, 0, false, &CorruptError{Path: path, Err: errors.New("not a journal (bad magic or version)")}
	}
	off := len(fileMagic)
	// v1Last is the last completed checkpoint as a version 1 coordinator
	// counted it (a generation that restored nothing did not undo it): its
	// logs may have been cut to it.
	var v1Last int64
	var v1Has bool
	for off < len(b) {
		r, n, err := DecodeRecord(b[off:])
		if err != nil {
			if torn(b[off:]) {
				break
			}
			return st, off, v1, &CorruptError{Path: path, Offset: int64(off), Err: err}
		}
		if err := st.apply(r); err != nil {
			return st, off, v1, &CorruptError{Path: path, Offset: int64(off), Err: err}
		}
		switch r := r.(type) {
		case *Checkpoint:
			v1Last, v1Has = r.Ts, true
		case *Generation:
			if r.HasRestore && (!v1Has || r.Restore < v1Last) {
				v1Last, v1Has = r.Restore, true
			}
		}
		off += n
	}
	if v1 && v1Has {
		// Its coordinator committed after each checkpoint without a
		// record: the logs may have been cut up to the last one.
		if !st.HasCheckpoint {
			// A generation started over after it, which the cut logs
			// cannot replay; a Commit could not keep that floor either.
			return st, off, v1, &CorruptError{Path: path, Offset: int64(off), Err: fmt.Errorf(
				"generation %d restores no checkpoint, but version 1 may have cut the logs to checkpoint %d", st.Gen, v1Last)}
		}
		if !st.HasFloor || st.Floor < v1Last {
			st.Floor, st.HasFloor = v1Last, true
		}
	}
	return st, off, v1, nil
}

// Read returns the state of the journal at path without opening it for
// appends: it neither locks the file, nor cuts a torn tail, nor upgrades a
// version 1 journal, so it may read a journal a running coordinator appends
// to (a record being written reads as a torn tail). It fails with an error wrapping os.ErrNotExist if there is
// no journal, and with a *CorruptError if there is damage before its tail.
func Read(path string) (State, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return State{}, err
	}
	st, _, _, err := replay(path, b)
	return st, err
}

// torn reports whether b, which starts with a record that does not decode,
// is a torn tail: no intact record starts anywhere after that record's
// first byte. Records are appended one at a time, each fsynced before the
// next is written, so a crash can damage only the last; an intact record
// after a damaged one means the damage came later, from something else.
func torn(b []byte) bool {
	for i := 1; i+headerLen <= len(b); i++ {
		if _, _, err := DecodeRecord(b[i:]); err == nil {
			return false
		}
	}
	return true
}

// State returns what the journal's records add up to.
func (j *Journal) State() State { return j.state }

// Cut returns the bytes of torn tail Open removed.
func (j *Journal) Cut() int64 { return j.cut }

// Path is the journal file's path.
func (j *Journal) Path() string { return j.path }

// Append checks r against the journal's rules (see [ErrOrder]), then
// writes it and fsyncs the file. When Append returns nil, r survives a
// crash. After a failed write the journal refuses further appends.
func (j *Journal) Append(r Record) error {
	if j.err != nil {
		return j.err
	}
	next := j.state
	if err := next.apply(r); err != nil {
		return err
	}
	b, err := AppendRecord(j.buf[:0], r)
	if err != nil {
		return err
	}
	j.buf = b
	if _, err := j.f.WriteAt(b, j.off); err != nil {
		j.err = fmt.Errorf("journal: writing %s: %w", j.path, err)
		return j.err
	}
	if err := j.sync(); err != nil {
		j.err = err
		return err
	}
	j.off += int64(len(b))
	j.state = next
	return nil
}

func (j *Journal) sync() error {
	if j.opts.NoSync {
		return nil
	}
	if err := j.f.Sync(); err != nil {
		return fmt.Errorf("journal: fsync of %s: %w", j.path, err)
	}
	return nil
}

// Close releases the file and its lock.
func (j *Journal) Close() error {
	if j.err == ErrClosed {
		return nil
	}
	j.err = ErrClosed
	return j.f.Close()
}
