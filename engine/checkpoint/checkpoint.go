// Package checkpoint keeps the engine's checkpoints durably in a local
// directory: one file per (task, timestamp) holding the task's state as of
// that global minimum clock.
//
// A checkpoint becomes visible atomically: [Store.Save] writes a temporary
// file, fsyncs it, renames it to its final name and fsyncs the directory, so
// after a crash a checkpoint file is either complete or absent; temporary
// files left by a crash are ignored and removed by [Open]. Every file
// carries a header with a magic number, the timestamp, the state length and
// a CRC-32C of the state, and a file that fails any check is skipped with a
// logged reason, never loaded.
//
// Recovery asks each node's Store for the timestamps at which all its tasks
// have a valid checkpoint ([Store.Common]; [Store.LatestCommon] is the
// newest), restores one that every node has, and [Store.Load]s each task's
// state at that timestamp.
//
// File layout (little endian):
//
//	offset size field
//	0      4    magic "SLCP"
//	4      8    timestamp (int64)
//	12     8    state length in bytes
//	20     4    CRC-32C (Castagnoli) of bytes 4..20 followed by the state
//	24     n    state
//
// File names are "<task>@<ts>.ckpt", with every task byte outside
// [A-Za-z0-9._-] written as %XX.
package checkpoint

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/sluicehq/sluice/internal/crcframe"
	"github.com/sluicehq/sluice/internal/durable"
)

const (
	headerLen = 24
	fileExt   = ".ckpt"
	tmpPrefix = ".tmp-"
)

var (
	fileMagic = [4]byte{'S', 'L', 'C', 'P'}
	// fileLayout is a file's framing: the state's length at 12, the CRC at
	// 20, covering bytes 4..20 and the state.
	fileLayout = crcframe.Layout{HeaderLen: headerLen, LenAt: 12, Len64: true, CRCAt: 20, CoverFrom: 4, CoverTo: 20}
)

// Errors returned by the store.
var (
	// ErrNotFound means there is no checkpoint file for the task and
	// timestamp asked for.
	ErrNotFound = errors.New("checkpoint: not found")
	// ErrCorrupt is wrapped by [*CorruptError].
	ErrCorrupt = errors.New("checkpoint: corrupt file")
	// ErrEmptyTask means a task name was empty.
	ErrEmptyTask = errors.New("checkpoint: empty task name")
)

// CorruptError reports a checkpoint file that failed verification. It
// wraps [ErrCorrupt].
type CorruptError struct {
	Path   string
	Reason string // for example "CRC mismatch"
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("checkpoint: corrupt file %s: %s", e.Path, e.Reason)
}

// Unwrap returns ErrCorrupt.
func (e *CorruptError) Unwrap() error { return ErrCorrupt }

// Config configures a Store.
type Config struct {
	// Keep is how many checkpoints per task Save retains, the newest one
	// included. Default 2, so that a checkpoint that completed for some
	// tasks but not all still leaves a common older one.
	Keep int
	// Logger receives the reasons checkpoint files are skipped. Default
	// slog.Default().
	Logger *slog.Logger
	// NoSync skips every fsync, for tests: a machine crash may then lose or
	// tear checkpoints.
	NoSync bool
}

// DefaultConfig returns the configuration Open uses.
func DefaultConfig() Config {
	return Config{Keep: 2, Logger: slog.Default()}
}

// Validate reports whether c is usable.
func (c Config) Validate() error {
	if c.Keep < 1 {
		return fmt.Errorf("checkpoint: Keep is %d, must be at least 1", c.Keep)
	}
	if c.Logger == nil {
		return errors.New("checkpoint: nil Logger")
	}
	return nil
}

// Store is a directory of checkpoint files. Only one Store may use a
// directory at a time. All methods are safe for concurrent use; Save calls
// for one task must not run concurrently with each other.
type Store struct {
	dir string
	cfg Config
	// mu serializes the rename-and-prune step of Save and DiscardAfter, so
	// that retention of one task never races with another's listing.
	mu sync.Mutex
}

// Open opens the store in dir with [DefaultConfig], creating dir if needed.
func Open(dir string) (*Store, error) {
	return OpenConfig(dir, DefaultConfig())
}

// OpenConfig opens the store in dir, creating dir if needed, and removes
// temporary files left by a Save that crashed.
func OpenConfig(dir string, cfg Config) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := durable.MkdirAll(dir, !cfg.NoSync); err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	s := &Store{dir: dir, cfg: cfg}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), tmpPrefix) {
			s.cfg.Logger.Info("checkpoint: removing partial file of an interrupted save", "file", e.Name())
			if err := os.Remove(filepath.Join(dir, e.Name())); err != nil && !errors.Is(err, os.ErrNotExist) {
				return nil, fmt.Errorf("checkpoint: %w", err)
			}
		}
	}
	return s, nil
}

// Dir returns the store's directory.
func (s *Store) Dir() string { return s.dir }

// Save durably stores state as task's checkpoint at ts: when it returns nil
// the checkpoint survives a crash of the machine. An existing checkpoint of
// the same task and ts is replaced. The store does not keep state.
//
// Retention: afterwards the task keeps this checkpoint and the Keep-1
// newest older ones. Checkpoints of the task newer than ts are deleted:
// saving an older timestamp happens only after recovery to an earlier
// point, which abandons them.
func (s *Store) Save(task string, ts int64, state []byte) error {
	if task == "" {
		return ErrEmptyTask
	}
	name := fileName(task, ts)
	tmp := filepath.Join(s.dir, fmt.Sprintf("%s%s-%016x", tmpPrefix, name, rand.Uint64()))
	if err := s.writeTemp(tmp, ts, state); err != nil {
		os.Remove(tmp)
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := os.Rename(tmp, filepath.Join(s.dir, name)); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("checkpoint: %w", err)
	}
	if err := s.syncDir(); err != nil {
		return err
	}
	return s.pruneLocked(task, ts)
}

func (s *Store) writeTemp(path string, ts int64, state []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	var h [headerLen]byte
	copy(h[0:4], fileMagic[:])
	binary.LittleEndian.PutUint64(h[4:12], uint64(ts))
	fileLayout.Seal(h[:], state)
	_, err = f.Write(h[:])
	if err == nil {
		_, err = f.Write(state)
	}
	if err == nil && !s.cfg.NoSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("checkpoint: writing %s: %w", path, err)
	}
	return nil
}

func (s *Store) syncDir() error {
	if s.cfg.NoSync {
		return nil
	}
	if err := durable.SyncDir(s.dir); err != nil {
		return fmt.Errorf("checkpoint: syncing directory: %w", err)
	}
	return nil
}

// pruneLocked applies the retention rule of Save after task saved ts.
func (s *Store) pruneLocked(task string, ts int64) error {
	older := 0
	return s.removeLocked([]string{task}, func(t int64) bool { // newest first
		if t < ts {
			older++
			return older >= s.cfg.Keep
		}
		return t > ts
	})
}

// DiscardAfter deletes the checkpoints of tasks newer than ts. Recovery
// calls it for every task with the recovery point, so that a checkpoint
// that completed for only some tasks before the crash can never be
// mistaken for a common one later.
func (s *Store) DiscardAfter(ts int64, tasks ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.removeLocked(tasks, func(t int64) bool { return t > ts })
}

// DiscardBefore deletes the checkpoints of tasks older than ts. The engine
// calls it once no checkpoint older than ts will be restored.
func (s *Store) DiscardBefore(ts int64, tasks ...string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.removeLocked(tasks, func(t int64) bool { return t < ts })
}

// removeLocked deletes the checkpoints of tasks whose times drop says to,
// asked newest first for each task; it lists the directory once and syncs
// it once if it deleted any. The caller holds s.mu.
func (s *Store) removeLocked(tasks []string, drop func(t int64) bool) error {
	all, err := s.list()
	if err != nil {
		return err
	}
	removed := false
	for _, task := range tasks {
		for _, t := range all[task] {
			if !drop(t) {
				continue
			}
			if err := os.Remove(filepath.Join(s.dir, fileName(task, t))); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("checkpoint: %w", err)
			}
			removed = true
		}
	}
	if removed {
		return s.syncDir()
	}
	return nil
}

// List returns the timestamps of task's checkpoint files, newest first,
// without verifying them.
func (s *Store) List(task string) ([]int64, error) {
	all, err := s.list()
	if err != nil {
		return nil, err
	}
	return all[task], nil
}

// list maps each task to the timestamps of its checkpoint files, newest
// first. Names that do not parse are ignored.
func (s *Store) list() (map[string][]int64, error) {
	ents, err := os.ReadDir(s.dir)
	if err != nil {
		return nil, fmt.Errorf("checkpoint: %w", err)
	}
	all := make(map[string][]int64)
	for _, e := range ents {
		task, ts, ok := parseFileName(e.Name())
		if ok && e.Type().IsRegular() {
			all[task] = append(all[task], ts)
		}
	}
	for _, tss := range all {
		slices.Sort(tss)
		slices.Reverse(tss)
	}
	return all, nil
}

// Load returns the state task saved at ts, after verifying the file. It
// returns an error wrapping ErrNotFound if there is no such checkpoint and a
// [*CorruptError] if the file fails verification. The caller owns the
// returned slice.
func (s *Store) Load(task string, ts int64) ([]byte, error) {
	path := filepath.Join(s.dir, fileName(task, ts))
	var state []byte
	err := s.verify(path, ts, func(n int64) io.Writer {
		state = make([]byte, 0, n)
		return (*sliceWriter)(&state)
	})
	if err != nil {
		return nil, err
	}
	return state, nil
}

type sliceWriter []byte

func (w *sliceWriter) Write(p []byte) (int, error) {
	*w = append(*w, p...)
	return len(p), nil
}

// verify checks the file at path: magic, timestamp, length against the
// file's real size (so a corrupt length never drives an allocation) and CRC.
// The state is streamed to the writer sink returns, which is told its size.
func (s *Store) verify(path string, ts int64, sink func(n int64) io.Writer) error {
	f, err := os.Open(path)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("%w: %s", ErrNotFound, path)
		}
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	corrupt := func(reason string) error { return &CorruptError{Path: path, Reason: reason} }
	var h [headerLen]byte
	if fi.Size() < headerLen {
		return corrupt("shorter than the header")
	}
	if _, err := io.ReadFull(f, h[:]); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	if [4]byte(h[0:4]) != fileMagic {
		return corrupt("bad magic")
	}
	if got := int64(binary.LittleEndian.Uint64(h[4:12])); got != ts {
		return corrupt(fmt.Sprintf("header timestamp %d does not match the name", got))
	}
	n := fileLayout.BodyLen(h[:])
	if n != uint64(fi.Size()-headerLen) {
		return corrupt(fmt.Sprintf("header claims %d bytes of state, file has %d", n, fi.Size()-headerLen))
	}
	crc := fileLayout.Hash(h[:])
	w := io.MultiWriter(crc, sink(int64(n)))
	if _, err := io.CopyN(w, f, int64(n)); err != nil {
		return fmt.Errorf("checkpoint: reading %s: %w", path, err)
	}
	if crc.Sum32() != fileLayout.Stored(h[:]) {
		return corrupt("CRC mismatch")
	}
	return nil
}

// valid reports whether task's checkpoint at ts verifies, logging why not.
// Only I/O failures other than a missing file are returned as errors.
func (s *Store) valid(task string, ts int64) (bool, error) {
	path := filepath.Join(s.dir, fileName(task, ts))
	err := s.verify(path, ts, func(int64) io.Writer { return io.Discard })
	return s.skippable(task, ts, err)
}

// skippable sorts the outcome of reading a checkpoint: ok, skipped (logged)
// or a real error.
func (s *Store) skippable(task string, ts int64, err error) (bool, error) {
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, ErrCorrupt):
		s.cfg.Logger.Warn("checkpoint: skipping corrupt checkpoint", "task", task, "ts", ts, "reason", err)
		return false, nil
	case errors.Is(err, ErrNotFound):
		// Deleted by retention after we listed it.
		return false, nil
	default:
		return false, err
	}
}

// Latest returns task's newest checkpoint that verifies. Corrupt files are
// skipped with a logged reason. ok is false if the task has no valid
// checkpoint. The caller owns state.
func (s *Store) Latest(task string) (ts int64, state []byte, ok bool, err error) {
	tss, err := s.List(task)
	if err != nil {
		return 0, nil, false, err
	}
	for _, t := range tss {
		st, err := s.Load(task, t)
		good, err := s.skippable(task, t, err)
		if err != nil {
			return 0, nil, false, err
		}
		if good {
			return t, st, true, nil
		}
	}
	return 0, nil, false, nil
}

// LatestCommon returns the newest timestamp at which every listed task has a
// checkpoint that verifies: the job's recovery point. ok is false if there is
// none (or tasks is empty). It reads every candidate file in full to check
// it, streaming, without keeping the states.
func (s *Store) LatestCommon(tasks []string) (ts int64, ok bool, err error) {
	common, err := s.common(tasks, 1)
	if err != nil || len(common) == 0 {
		return 0, false, err
	}
	return common[0], true, nil
}

// Common returns every timestamp, newest first, at which every listed task
// has a checkpoint that verifies (none if tasks is empty). Like
// LatestCommon it reads each candidate file in full.
func (s *Store) Common(tasks []string) ([]int64, error) { return s.common(tasks, -1) }

// common is Common's first max timestamps (all of them when max < 0): it
// stops verifying once it has them.
func (s *Store) common(tasks []string, max int) ([]int64, error) {
	if len(tasks) == 0 {
		return nil, nil
	}
	cands, err := s.candidates(tasks)
	if err != nil {
		return nil, err
	}
	var common []int64
	for _, t := range cands {
		if len(common) == max {
			break
		}
		good, err := s.validAll(tasks, t)
		if err != nil {
			return nil, err
		}
		if good {
			common = append(common, t)
		}
	}
	return common, nil
}

// candidates returns the timestamps, newest first, at which every task
// has a checkpoint file, without verifying them.
func (s *Store) candidates(tasks []string) ([]int64, error) {
	all, err := s.list()
	if err != nil {
		return nil, err
	}
	var cands []int64
	for _, t := range all[tasks[0]] {
		common := true
		for _, task := range tasks[1:] {
			if !slices.Contains(all[task], t) {
				common = false
				break
			}
		}
		if common {
			cands = append(cands, t)
		}
	}
	return cands, nil
}

// validAll reports whether every task's checkpoint at ts verifies.
func (s *Store) validAll(tasks []string, ts int64) (bool, error) {
	for _, task := range tasks {
		good, err := s.valid(task, ts)
		if err != nil || !good {
			return false, err
		}
	}
	return true, nil
}

// fileName is the checkpoint file name of task at ts.
func fileName(task string, ts int64) string {
	var b strings.Builder
	b.Grow(len(task) + 26)
	const hex = "0123456789ABCDEF"
	for i := 0; i < len(task); i++ {
		c := task[i]
		// A leading '.' is escaped: the name would otherwise be hidden,
		// and one starting with tmpPrefix taken for a temporary file
		// (never listed, and removed by the next Open).
		if 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' && i > 0 || c == '_' || c == '-' {
			b.WriteByte(c)
		} else {
			b.WriteByte('%')
			b.WriteByte(hex[c>>4])
			b.WriteByte(hex[c&15])
		}
	}
	b.WriteByte('@')
	b.WriteString(strconv.FormatInt(ts, 10))
	b.WriteString(fileExt)
	return b.String()
}

// parseFileName inverts fileName; it rejects anything fileName would not
// produce, so that every listed file maps back to exactly its own name.
func parseFileName(name string) (task string, ts int64, ok bool) {
	base, ok := strings.CutSuffix(name, fileExt)
	if !ok || strings.HasPrefix(name, tmpPrefix) {
		return "", 0, false
	}
	at := strings.LastIndexByte(base, '@')
	if at <= 0 {
		return "", 0, false
	}
	ts, err := strconv.ParseInt(base[at+1:], 10, 64)
	if err != nil {
		return "", 0, false
	}
	var b []byte
	enc := base[:at]
	for i := 0; i < len(enc); i++ {
		if enc[i] != '%' {
			b = append(b, enc[i])
			continue
		}
		if i+2 >= len(enc) {
			return "", 0, false
		}
		v, err := strconv.ParseUint(enc[i+1:i+3], 16, 8)
		if err != nil {
			return "", 0, false
		}
		b = append(b, byte(v))
		i += 2
	}
	task = string(b)
	if fileName(task, ts) != name {
		return "", 0, false
	}
	return task, ts, true
}
