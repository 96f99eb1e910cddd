// Package store is the source-end message store of the task engine: a
// segmented, append-only log on local disk, one per source task, from which
// the engine replays every message at or after a checkpoint's timestamp
// after a failure.
//
// A source task appends each run of messages it emits as one record batch
// ([Log.Append]); the batch is the unit of atomicity. At each checkpoint the
// engine calls [Log.Sync], and once a checkpoint at timestamp ts is complete
// everywhere it calls [Log.DeleteBefore](ts) to drop the segments nothing
// can ask for again. On recovery [Open] verifies the segments and cuts a torn
// tail left by a crash, and [Log.Replay] hands back every record with
// Ts >= the checkpoint's timestamp, in append order.
//
// A directory holds segment files named by a 20-digit sequence number with
// the extension ".seg". Each is a sequence of batches (the byte layout is
// documented in format.go): a 32-byte header with a magic number, body
// length, record count, minimum and maximum timestamp and a CRC-32C, then
// the records, each a varint timestamp delta from the batch minimum, a
// varint length and the payload. Only the last segment can have a torn tail:
// a segment is fsynced before the next one is created (unless NoSync).
//
// A failed fsync cannot be detected later: the records it did not make
// durable read back from the page cache until the kernel drops them, and
// Linux reports a writeback error to one fsync only. So the log writes the
// error to a file named [SyncFailedFile] in its directory as soon as an
// fsync fails, and Open refuses a directory that holds one: a process that
// dies before acting on the error leaves a log that no later process takes
// for whole.
//
// Memory is bounded: segments are read through a 64 KiB streaming buffer and
// a body buffer no larger than the largest batch present on disk, and the
// in-memory sparse index costs 16 bytes per IndexInterval bytes of log.
package store

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"github.com/sluicehq/sluice/internal/durable"
)

// Record is one message: its event timestamp and its payload.
type Record struct {
	Ts      int64
	Payload []byte
}

// Replayable is what recovery needs from a source: every record with
// Ts >= fromTs, in the order the source first produced them, passed to fn in
// runs. A source backed by an external replayable system (a message queue
// that can seek by time) implements it instead of a local [Log]. The
// records and their payloads are valid only during fn; fn's error stops the
// replay and is returned.
type Replayable interface {
	Replay(fromTs int64, fn func(recs []Record) error) error
}

var _ Replayable = (*Log)(nil)

// SyncFailedFile is the file, in a log's directory, that records the
// first failed fsync of the log. Open refuses the directory while it exists
// ([ErrSyncFailed]); a new log needs a new directory.
const SyncFailedFile = "fsync-failed"

// Options configure a Log. The zero value is ready to use.
type Options struct {
	// SegmentBytes is the size at which the active segment is sealed and a
	// new one started. A batch larger than this gets a segment of its own.
	// Default 64 MiB.
	SegmentBytes int64
	// IndexInterval is the number of bytes between sparse index entries.
	// Default 4 KiB.
	IndexInterval int
	// NoSync skips every fsync: of segments on Sync, roll and Close, and of
	// the directory. For tests and benchmarks; a machine crash may then
	// lose or tear any segment.
	NoSync bool
	// SyncAhead is how many bytes may be appended to the active segment
	// before a background fsync starts writing them back, so that the
	// fsyncs of Sync and of a segment roll, which the appending goroutine
	// waits for, find little left to write. Default 4 MiB; negative: never.
	SyncAhead int64
}

const (
	defaultSegmentBytes  = 64 << 20
	defaultIndexInterval = 4 << 10
	defaultSyncAhead     = 4 << 20
)

func (o Options) withDefaults() Options {
	if o.SegmentBytes <= 0 {
		o.SegmentBytes = defaultSegmentBytes
	}
	if o.IndexInterval <= 0 {
		o.IndexInterval = defaultIndexInterval
	}
	if o.SyncAhead == 0 {
		o.SyncAhead = defaultSyncAhead
	}
	return o
}

// Stats counts what the log holds.
type Stats struct {
	Segments int   // segment files, including the active one
	Bytes    int64 // bytes of valid batches in all segments
	Records  int64
	Batches  int64
}

// Log is a segmented append-only record log in one directory. Only one Log
// may have a directory open at a time.
//
// All methods are safe for concurrent use. Replay reads without blocking
// Append (it sees what was appended before it began); DeleteBefore and
// Close wait for running Replays to finish, so fn must not call them.
type Log struct {
	dir       string
	opts      Options
	recovered int64

	// fsync is (*os.File).Sync; tests substitute it to inject failures.
	fsync func(*os.File) error

	// replayMu is held shared by Replay and exclusively by DeleteBefore and
	// Close, so that no segment a replay may read is deleted or closed.
	replayMu sync.RWMutex

	// ahead counts the running background fsync (at most one).
	ahead sync.WaitGroup

	mu struct {
		sync.Mutex
		segs []segment // sealed segments then the active one, in order
		f    *os.File  // the active segment, opened for writing
		buf  []byte    // reusable encoding buffer
		err  error     // sticky: a failed write could not be undone, or an fsync failed
		// syncFailed says an fsync failed and SyncFailedFile was written.
		syncFailed bool
		closed     bool
		unsynced   int64 // bytes appended to f since the last fsync began
		syncing    bool  // a background fsync runs
		// aheadDone is closed when the running background fsync has
		// recorded its outcome.
		aheadDone chan struct{}
	}
}

// Open opens the log in dir, creating dir and an empty first segment if
// needed. It verifies every batch of every segment: in the last segment the
// first batch that is torn (partial header, partial body, bad length or
// magic, CRC mismatch) and everything after it are cut off, and
// [Log.Recovered] reports how many bytes; in an earlier segment, which was
// fsynced before its successor was created, such a batch is an error
// wrapping [ErrCorrupt]. A directory whose log once failed an fsync (it
// holds [SyncFailedFile]) is refused with an error wrapping
// [ErrSyncFailed] that says the failure.
func Open(dir string, opts Options) (*Log, error) {
	opts = opts.withDefaults()
	if err := durable.MkdirAll(dir, !opts.NoSync); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	marker := filepath.Join(dir, SyncFailedFile)
	if b, err := os.ReadFile(marker); err == nil {
		return nil, fmt.Errorf("%w (%s: %s)", ErrSyncFailed, marker, b)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("store: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	var seqs []uint64
	for _, e := range ents {
		if seq, ok := parseSegmentName(e.Name()); ok && e.Type().IsRegular() {
			seqs = append(seqs, seq)
		}
	}
	slices.Sort(seqs)

	l := &Log{dir: dir, opts: opts, fsync: (*os.File).Sync}
	r := newReader()
	for i, seq := range seqs {
		last := i == len(seqs)-1
		s := newSegment(dir, seq)
		if err := l.recoverSegment(r, &s, last); err != nil {
			if l.mu.f != nil {
				l.mu.f.Close()
			}
			return nil, err
		}
		l.mu.segs = append(l.mu.segs, s)
	}
	if len(l.mu.segs) == 0 {
		if err := l.createSegmentLocked(1); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// recoverSegment scans s; for the last segment it cuts a torn tail and
// leaves the file open for appending in l.mu.f.
func (l *Log) recoverSegment(r *reader, s *segment, last bool) error {
	flag := os.O_RDONLY
	if last {
		flag = os.O_RDWR
	}
	f, err := os.OpenFile(s.path, flag, 0)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return fmt.Errorf("store: %w", err)
	}
	bad, err := scan(r, f, s, fi.Size(), int64(l.opts.IndexInterval))
	if err != nil {
		f.Close()
		return fmt.Errorf("store: reading %s: %w", s.path, err)
	}
	if !last {
		f.Close()
		if bad != nil {
			return &CorruptError{Segment: s.path, Offset: s.size, Reason: bad.Error()}
		}
		return nil
	}
	if s.size < fi.Size() {
		if err := f.Truncate(s.size); err != nil {
			f.Close()
			return fmt.Errorf("store: cutting torn tail of %s: %w", s.path, err)
		}
		if !l.opts.NoSync {
			if err := l.fsync(f); err != nil {
				f.Close()
				return fmt.Errorf("store: %w", err)
			}
		}
		l.recovered = fi.Size() - s.size
	}
	l.mu.f = f
	return nil
}

// createSegmentLocked creates segment seq, makes it the active one and
// makes its directory entry durable.
func (l *Log) createSegmentLocked(seq uint64) error {
	s := newSegment(l.dir, seq)
	f, err := os.OpenFile(s.path, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	if !l.opts.NoSync {
		if err := syncDir(l.dir); err != nil {
			f.Close()
			return err
		}
	}
	l.mu.f = f
	l.mu.segs = append(l.mu.segs, s)
	return nil
}

func syncDir(dir string) error {
	if err := durable.SyncDir(dir); err != nil {
		return fmt.Errorf("store: syncing directory %s: %w", dir, err)
	}
	return nil
}

// Dir returns the directory of the log.
func (l *Log) Dir() string { return l.dir }

// Recovered returns how many bytes Open cut from a torn tail of the last
// segment; zero after a clean shutdown.
func (l *Log) Recovered() int64 { return l.recovered }

// Append writes recs as one batch at the end of the log: after a crash
// either all of them are recovered or none. Timestamps need not be
// increasing. Append does not fsync; see [Log.Sync]. The log does not keep
// recs or their payloads. An empty recs is a no-op.
//
// If the write fails, Append undoes any partial write and returns the
// error; if even that fails, the log refuses further appends. When the
// batch starts a new segment and sealing the full one (its fsync) fails,
// the log refuses every later Append and Sync with that error.
func (l *Log) Append(recs []Record) error {
	if len(recs) == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mu.closed {
		return ErrClosed
	}
	if l.mu.err != nil {
		return l.mu.err
	}
	buf, err := appendBatch(l.mu.buf[:0], recs)
	if err != nil {
		return err
	}
	l.mu.buf = buf
	act := &l.mu.segs[len(l.mu.segs)-1]
	if act.size > 0 && act.size+int64(len(buf)) > l.opts.SegmentBytes {
		if err := l.rollLocked(); err != nil {
			return err
		}
		act = &l.mu.segs[len(l.mu.segs)-1]
	}
	if _, err := l.mu.f.WriteAt(buf, act.size); err != nil {
		if terr := l.mu.f.Truncate(act.size); terr != nil {
			l.mu.err = fmt.Errorf("store: log unusable after failed write (%v) and failed undo: %w", err, terr)
		}
		return fmt.Errorf("store: append: %w", err)
	}
	hd, _ := decodeHeader(buf[:headerLen])
	act.add(hd, int64(len(buf)), int64(l.opts.IndexInterval))
	if !l.opts.NoSync && l.opts.SyncAhead > 0 {
		l.mu.unsynced += int64(len(buf))
		if l.mu.unsynced >= l.opts.SyncAhead && !l.mu.syncing {
			l.mu.syncing, l.mu.unsynced = true, 0
			l.mu.aheadDone = make(chan struct{})
			l.ahead.Add(1)
			go l.syncAhead(l.mu.f, l.mu.aheadDone)
		}
	}
	return nil
}

// syncAhead fsyncs f in the background and closes done once its outcome
// is recorded. Its failure makes the log refuse further appends and syncs:
// Linux reports a writeback error to one fsync only, so a later Sync could
// otherwise succeed over lost data.
func (l *Log) syncAhead(f *os.File, done chan struct{}) {
	defer l.ahead.Done()
	err := l.fsync(f)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.mu.syncing = false
	if err != nil && !errors.Is(err, os.ErrClosed) {
		l.syncFailedLocked(fmt.Errorf("store: background fsync: %w", err))
	}
	close(done)
}

// syncFailedLocked makes the failure of an fsync, err, sticky (every later
// call returns the first error, wrapping ErrSyncFailed) and, the first
// time, durable: it writes err to SyncFailedFile, which makes every later
// Open refuse the directory. If even that fails, the error says so too.
func (l *Log) syncFailedLocked(err error) error {
	if l.mu.err == nil {
		l.mu.err = fmt.Errorf("%w: %w", ErrSyncFailed, err)
	}
	if l.mu.syncFailed {
		return l.mu.err
	}
	l.mu.syncFailed = true
	path := filepath.Join(l.dir, SyncFailedFile)
	werr := durable.WriteFile(path, true, func(w io.Writer) error {
		_, werr := io.WriteString(w, err.Error())
		return werr
	})
	if werr != nil {
		l.mu.err = fmt.Errorf("%w (and recording it in %s failed: %v)", l.mu.err, path, werr)
	}
	return l.mu.err
}

// rollLocked seals the active segment (fsyncing it, so that only the last
// segment can ever hold a torn tail) and starts the next one. Any failure
// is sticky: after a failed fsync a retry would succeed (the error is
// reported once) and seal a segment whose data may be lost.
func (l *Log) rollLocked() error {
	act := l.mu.segs[len(l.mu.segs)-1]
	if !l.opts.NoSync {
		if err := l.fsync(l.mu.f); err != nil {
			return l.syncFailedLocked(fmt.Errorf("store: fsync sealing %s: %w", act.path, err))
		}
	}
	if err := l.mu.f.Close(); err != nil {
		l.mu.err = fmt.Errorf("store: closing %s to seal it: %w", act.path, err)
		return l.mu.err
	}
	l.mu.f = nil
	l.mu.unsynced = 0
	if err := l.createSegmentLocked(act.seq + 1); err != nil {
		l.mu.err = err
		return err
	}
	return nil
}

// Sync makes every batch appended before it was called durable (fsync of
// the active segment; sealed ones were synced when sealed). The engine
// calls it at each checkpoint. Appends go on while the fsync runs. A no-op
// with NoSync.
//
// Linux reports a writeback error to one fsync of a file only, so Sync
// also waits for the background fsync in flight, if any, and returns its
// error: that fsync may have taken the error of data Sync covers. Once an
// fsync has failed, the log refuses every Append and Sync with its error.
func (l *Log) Sync() error {
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	if l.mu.err != nil || l.opts.NoSync {
		err := l.mu.err
		l.mu.Unlock()
		return err
	}
	f := l.mu.f
	l.mu.unsynced = 0
	l.mu.Unlock()
	err := l.fsync(f)
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil && !errors.Is(err, os.ErrClosed) {
		l.syncFailedLocked(fmt.Errorf("store: fsync: %w", err))
	}
	// A background fsync that began before ours returned is either done,
	// its error recorded, or still running: wait for it. One that begins
	// later finds the data we covered on disk.
	if l.mu.syncing {
		done := l.mu.aheadDone
		l.mu.Unlock()
		<-done
		l.mu.Lock()
	}
	if l.mu.err != nil {
		return l.mu.err
	}
	if err != nil && l.mu.closed {
		return ErrClosed
	}
	// Else err is nil, or os.ErrClosed because a roll sealed f after
	// fsyncing it (a failure there would be in l.mu.err).
	return nil
}

// Replay calls fn with every record whose Ts >= fromTs, in append order, in
// runs of at most 1024 records (a batch may be split over several runs,
// never merged with another). It sees the batches appended before it
// began. Segments whose records are all older than fromTs are skipped
// unread, and within a segment the sparse index skips ahead to the last
// point before which every record is older.
//
// The records and their payloads are valid only during fn (they alias a
// reusable read buffer). An error from fn stops the replay and is returned
// as is. A batch that fails verification is reported as a [*CorruptError].
// fn must not call DeleteBefore or Close.
func (l *Log) Replay(fromTs int64, fn func(recs []Record) error) error {
	l.replayMu.RLock()
	defer l.replayMu.RUnlock()
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	// Segment values are copied; their index slices are only ever appended
	// to, so the copied prefix stays valid.
	segs := slices.Clone(l.mu.segs)
	l.mu.Unlock()

	r := newReader()
	for i := range segs {
		s := &segs[i]
		if s.batches == 0 || s.maxTs < fromTs {
			continue
		}
		if err := replaySegment(r, s, fromTs, fn); err != nil {
			return err
		}
	}
	return nil
}

func replaySegment(r *reader, s *segment, fromTs int64, fn func([]Record) error) error {
	f, err := os.Open(s.path)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	defer f.Close()
	r.reset(f, s.path, s.startFor(fromTs), s.size)
	for {
		hd, err := r.next()
		if err != nil {
			if err == io.EOF {
				return nil
			}
			return asCorrupt(r, err)
		}
		if hd.maxTs < fromTs {
			if err := r.skip(hd); err != nil {
				return err
			}
			continue
		}
		at := r.off
		body, err := r.readBody(hd)
		if err != nil {
			return asCorrupt(r, err)
		}
		r.run, err = decodeRecords(r.run, body, hd, fromTs, fn)
		if err != nil {
			if te, ok := err.(tornError); ok {
				return &CorruptError{Segment: s.path, Offset: at, Reason: te.Error()}
			}
			return err
		}
	}
}

func asCorrupt(r *reader, err error) error {
	if te, ok := err.(tornError); ok {
		return &CorruptError{Segment: r.path, Offset: r.off, Reason: te.Error()}
	}
	return err
}

// DeleteBefore deletes every sealed segment whose records all have
// Ts < ts, and returns how many it deleted. The engine calls it with the
// timestamp of the last completed checkpoint; afterwards a Replay from below
// ts may miss records. The active segment is never deleted. It waits for
// running Replays; Append and Sync go on while the files are removed.
func (l *Log) DeleteBefore(ts int64) (removed int, err error) {
	l.replayMu.Lock()
	defer l.replayMu.Unlock()
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return 0, ErrClosed
	}
	var doomed []segment
	segs := l.mu.segs
	keep := segs[:0]
	for i := range segs {
		s := segs[i]
		active := i == len(segs)-1
		if !active && (s.batches == 0 || s.maxTs < ts) {
			doomed = append(doomed, s)
			continue
		}
		keep = append(keep, s)
	}
	clear(segs[len(keep):])
	l.mu.segs = keep
	l.mu.Unlock()
	// The doomed segments are sealed and no Replay runs (replayMu): they
	// are unlinked without the lock, so that Append goes on meanwhile.
	var failed []segment
	for _, s := range doomed {
		if rerr := os.Remove(s.path); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			if err == nil {
				err = fmt.Errorf("store: %w", rerr)
			}
			failed = append(failed, s)
			continue
		}
		removed++
	}
	if len(failed) > 0 {
		l.mu.Lock()
		l.mu.segs = append(l.mu.segs, failed...)
		slices.SortFunc(l.mu.segs, func(a, b segment) int { return cmp.Compare(a.seq, b.seq) })
		l.mu.Unlock()
	}
	if removed > 0 && !l.opts.NoSync {
		if serr := syncDir(l.dir); err == nil {
			err = serr
		}
	}
	return removed, err
}

// Close syncs the active segment (unless NoSync) and closes the log. It
// waits for running Replays. It returns the error that made the log
// unusable, if any (a failed fsync, whose data may not be on disk, even
// when Close's own fsync succeeds), else the error of its own fsync or
// close. Closing twice returns ErrClosed.
func (l *Log) Close() error {
	l.replayMu.Lock()
	defer l.replayMu.Unlock()
	l.mu.Lock()
	if l.mu.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	l.mu.closed = true // no Append starts a background fsync any more
	l.mu.Unlock()
	l.ahead.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	var err error
	if l.mu.f != nil {
		if !l.opts.NoSync {
			if serr := l.fsync(l.mu.f); serr != nil {
				l.syncFailedLocked(fmt.Errorf("store: fsync: %w", serr))
			}
		}
		err = l.mu.f.Close()
		l.mu.f = nil
	}
	if l.mu.err != nil {
		return l.mu.err
	}
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// Stats returns counts of what the log holds. Safe for concurrent use.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := Stats{Segments: len(l.mu.segs)}
	for i := range l.mu.segs {
		s := &l.mu.segs[i]
		st.Bytes += s.size
		st.Records += s.records
		st.Batches += s.batches
	}
	return st
}
