package checkpoint

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// open returns a store whose skipped-file log goes to logs.
func open(t *testing.T, dir string, logs *bytes.Buffer) *Store {
	t.Helper()
	cfg := DefaultConfig()
	cfg.NoSync = true
	cfg.Logger = slog.New(slog.NewTextHandler(logs, nil))
	s, err := OpenConfig(dir, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func save(t *testing.T, s *Store, task string, ts int64, state string) {
	t.Helper()
	if err := s.Save(task, ts, []byte(state)); err != nil {
		t.Fatal(err)
	}
}

func TestASavedCheckpointLoadsBackAfterReopen(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir) // the default config, with fsync
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		task  string
		ts    int64
		state []byte
	}{
		{"3.17", 100, []byte("counts")},
		{"3.17", 200, []byte("more counts")},
		{"a task/with odd@chars%", -5, nil},
		{"big", math.MaxInt64, bytes.Repeat([]byte{7}, 100_000)},
		{"small", math.MinInt64, []byte{0}},
	} {
		if err := s.Save(c.task, c.ts, c.state); err != nil {
			t.Fatal(err)
		}
		s2, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		got, err := s2.Load(c.task, c.ts)
		if err != nil || !bytes.Equal(got, c.state) {
			t.Fatalf("Load(%q, %d) = %d bytes, %v; want %d bytes", c.task, c.ts, len(got), err, len(c.state))
		}
		ts, st, ok, err := s2.Latest(c.task)
		if err != nil || !ok || ts != c.ts || !bytes.Equal(st, c.state) {
			t.Fatalf("Latest(%q) = %d, %d bytes, %v, %v", c.task, ts, len(st), ok, err)
		}
	}
	if _, err := s.Load("3.17", 150); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Load of a missing checkpoint: %v", err)
	}
	if _, _, ok, err := s.Latest("nobody"); ok || err != nil {
		t.Fatalf("Latest of an unknown task: %v, %v", ok, err)
	}
	if err := s.Save("", 1, nil); !errors.Is(err, ErrEmptyTask) {
		t.Fatalf("Save with no task name: %v", err)
	}
}

func TestFileNamesRoundTripEveryTaskName(t *testing.T) {
	for _, task := range []string{"0.0", "a@b", "%41", "x/../y", "émoji 🙂", "-", "@", strings.Repeat("z", 100)} {
		for _, ts := range []int64{0, -1, math.MinInt64, math.MaxInt64} {
			name := fileName(task, ts)
			if strings.ContainsAny(name, "/\\ ") {
				t.Fatalf("file name %q for task %q is not a plain file name", name, task)
			}
			gt, gts, ok := parseFileName(name)
			if !ok || gt != task || gts != ts {
				t.Fatalf("parseFileName(%q) = %q, %d, %v; want %q, %d", name, gt, gts, ok, task, ts)
			}
		}
	}
	for _, name := range []string{"x@1.ckpt.tmp", ".tmp-x@1.ckpt", "@1.ckpt", "x@.ckpt", "x@01.ckpt", "x%4@1.ckpt", "x%41@1.ckpt", "x@1"} {
		if _, _, ok := parseFileName(name); ok {
			t.Fatalf("parseFileName accepted %q", name)
		}
	}
}

// TestATaskNamedLikeATemporaryFileKeepsItsCheckpoint: a task whose name
// starts with the temporary files' prefix (or any '.') saves a checkpoint
// that is listed, loads, and survives the next Open, which removes the
// temporary files of interrupted saves.
func TestATaskNamedLikeATemporaryFileKeepsItsCheckpoint(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.NoSync = true
	for _, task := range []string{tmpPrefix + "x", ".hidden"} {
		s, err := OpenConfig(dir, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Save(task, 3, []byte("state")); err != nil {
			t.Fatal(err)
		}
		if s, err = OpenConfig(dir, cfg); err != nil {
			t.Fatal(err)
		}
		ts, state, ok, err := s.Latest(task)
		if err != nil || !ok || ts != 3 || string(state) != "state" {
			t.Errorf("task %q: after Save and Open, Latest gives %d %q %v %v; want 3 \"state\"", task, ts, state, ok, err)
		}
	}
}

// corruptions damage a checkpoint file in the ways a crash or a disk can.
var corruptions = []struct {
	what   string
	damage func(b []byte) []byte
	reason string
}{
	{"a flipped state byte fails the CRC", func(b []byte) []byte { b[len(b)-1] ^= 1; return b }, "CRC mismatch"},
	{"a flipped CRC byte fails the CRC", func(b []byte) []byte { b[21] ^= 1; return b }, "CRC mismatch"},
	{"a truncated state contradicts the length", func(b []byte) []byte { return b[:len(b)-1] }, "claims"},
	{"a torn header is too short", func(b []byte) []byte { return b[:10] }, "shorter than the header"},
	{"an empty file is too short", func(b []byte) []byte { return b[:0] }, "shorter than the header"},
	{"a wrong magic is rejected", func(b []byte) []byte { b[0] = 'X'; return b }, "bad magic"},
	{"a huge claimed length is rejected, not allocated", func(b []byte) []byte {
		for i := 12; i < 20; i++ {
			b[i] = 0xff
		}
		return b
	}, "claims"},
	{"a timestamp that differs from the name is rejected", func(b []byte) []byte { b[4] ^= 1; return b }, "does not match the name"},
}

func TestACorruptNewestCheckpointIsSkippedWithALoggedReason(t *testing.T) {
	for _, c := range corruptions {
		t.Run(c.what, func(t *testing.T) {
			var logs bytes.Buffer
			s := open(t, t.TempDir(), &logs)
			save(t, s, "t", 10, "old state")
			save(t, s, "t", 20, "new state")
			p := filepath.Join(s.Dir(), fileName("t", 20))
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, c.damage(b), 0o644); err != nil {
				t.Fatal(err)
			}
			_, err = s.Load("t", 20)
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || !strings.Contains(ce.Reason, c.reason) {
				t.Fatalf("Load: %v, want a CorruptError saying %q", err, c.reason)
			}
			ts, st, ok, err := s.Latest("t")
			if err != nil || !ok || ts != 10 || string(st) != "old state" {
				t.Fatalf("Latest = %d, %q, %v, %v; want the older valid checkpoint", ts, st, ok, err)
			}
			if !strings.Contains(logs.String(), c.reason) || !strings.Contains(logs.String(), "skipping") {
				t.Fatalf("the skip was not logged with its reason: %q", logs.String())
			}
			if ts, ok, err := s.LatestCommon([]string{"t"}); err != nil || !ok || ts != 10 {
				t.Fatalf("LatestCommon = %d, %v, %v; want 10", ts, ok, err)
			}
		})
	}
}

func TestPartialTempFilesAreIgnoredAndRemovedOnOpen(t *testing.T) {
	dir := t.TempDir()
	var logs bytes.Buffer
	s := open(t, dir, &logs)
	save(t, s, "t", 1, "good")
	tmp := filepath.Join(dir, tmpPrefix+fileName("t", 2)+"-00000000deadbeef")
	if err := os.WriteFile(tmp, []byte("SLCP partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	if tss, err := s.List("t"); err != nil || !slices.Equal(tss, []int64{1}) {
		t.Fatalf("List = %v, %v; the temp file must not count", tss, err)
	}
	if ts, _, ok, _ := s.Latest("t"); !ok || ts != 1 {
		t.Fatalf("Latest = %d, %v", ts, ok)
	}
	open(t, dir, &logs)
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("temp file still there after Open: %v", err)
	}
}

func TestRetentionKeepsTheNewestKAndDropsAbandonedNewerOnes(t *testing.T) {
	var logs bytes.Buffer
	s := open(t, t.TempDir(), &logs)
	for ts := int64(1); ts <= 5; ts++ {
		save(t, s, "a", ts*10, "a")
		save(t, s, "b", ts*10, "b")
	}
	for _, task := range []string{"a", "b"} {
		if tss, _ := s.List(task); !slices.Equal(tss, []int64{50, 40}) {
			t.Fatalf("%s keeps %v, want the newest two [50 40]", task, tss)
		}
	}
	// After recovery to 40, saving 45 abandons 50.
	save(t, s, "a", 45, "a")
	if tss, _ := s.List("a"); !slices.Equal(tss, []int64{45, 40}) {
		t.Fatalf("a keeps %v, want [45 40]", tss)
	}
	if err := s.DiscardAfter(40, "b"); err != nil {
		t.Fatal(err)
	}
	if tss, _ := s.List("b"); !slices.Equal(tss, []int64{40}) {
		t.Fatalf("b keeps %v after DiscardAfter(40), want [40]", tss)
	}
	// DiscardBefore drops what every task named has below the floor, and
	// nothing of a task not named.
	save(t, s, "c", 30, "c")
	save(t, s, "c", 41, "c")
	if err := s.DiscardBefore(41, "a", "c"); err != nil {
		t.Fatal(err)
	}
	for task, want := range map[string][]int64{"a": {45}, "b": {40}, "c": {41}} {
		if tss, _ := s.List(task); !slices.Equal(tss, want) {
			t.Fatalf("%s keeps %v after DiscardBefore(41) of a and c, want %v", task, tss, want)
		}
	}

	cfg := DefaultConfig()
	cfg.Keep, cfg.NoSync = 3, true
	s3, err := OpenConfig(t.TempDir(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for ts := range int64(6) {
		save(t, s3, "c", ts, "c")
	}
	if tss, _ := s3.List("c"); !slices.Equal(tss, []int64{5, 4, 3}) {
		t.Fatalf("Keep 3 keeps %v", tss)
	}
	if _, err := OpenConfig(t.TempDir(), Config{Keep: 0, Logger: slog.Default()}); err == nil {
		t.Fatal("Keep 0 accepted")
	}
}

func TestLatestCommonIsTheNewestTimestampEveryTaskHasValid(t *testing.T) {
	var logs bytes.Buffer
	s := open(t, t.TempDir(), &logs)
	save(t, s, "src", 10, "s")
	save(t, s, "map", 10, "m")
	save(t, s, "sink", 10, "k")
	save(t, s, "src", 20, "s")
	save(t, s, "map", 20, "m") // the sink crashed before saving 20
	tasks := []string{"src", "map", "sink"}

	if ts, ok, err := s.LatestCommon(tasks); err != nil || !ok || ts != 10 {
		t.Fatalf("LatestCommon = %d, %v, %v; want 10", ts, ok, err)
	}
	if ts, ok, _ := s.LatestCommon(tasks[:2]); !ok || ts != 20 {
		t.Fatalf("LatestCommon of src and map = %d, %v; want 20", ts, ok)
	}
	save(t, s, "sink", 20, "k")
	if ts, ok, _ := s.LatestCommon(tasks); !ok || ts != 20 {
		t.Fatalf("after the sink saves 20: %d, %v", ts, ok)
	}
	// A corrupt file at 20 makes 10 the common point again.
	p := filepath.Join(s.Dir(), fileName("map", 20))
	if err := os.Truncate(p, headerLen+0); err != nil {
		t.Fatal(err)
	}
	if ts, ok, _ := s.LatestCommon(tasks); !ok || ts != 10 {
		t.Fatalf("with a corrupt map@20: %d, %v; want 10", ts, ok)
	}
	if _, ok, _ := s.LatestCommon(append(tasks, "never saved")); ok {
		t.Fatal("a task without checkpoints still found a common one")
	}
	if _, ok, _ := s.LatestCommon(nil); ok {
		t.Fatal("no tasks found a common checkpoint")
	}
}

func TestLoadStreamsTheStateWithoutReadingPastTheFile(t *testing.T) {
	var logs bytes.Buffer
	s := open(t, t.TempDir(), &logs)
	state := bytes.Repeat([]byte("0123456789"), 10_000)
	save(t, s, "t", 1, string(state))
	var sink bytes.Buffer
	err := s.verify(filepath.Join(s.Dir(), fileName("t", 1)), 1, func(n int64) io.Writer {
		if n != int64(len(state)) {
			t.Fatalf("sink told %d bytes, want %d", n, len(state))
		}
		return &sink
	})
	if err != nil || !bytes.Equal(sink.Bytes(), state) {
		t.Fatalf("verify: %v, %d bytes", err, sink.Len())
	}
}

// FuzzLoad: a checkpoint file of any content either fails to load as
// corrupt, without reading past the file or allocating what its header
// claims, or holds a state that Save writes as exactly those bytes; Latest
// agrees with Load.
func FuzzLoad(f *testing.F) {
	dir := f.TempDir()
	var logs bytes.Buffer
	cfg := DefaultConfig()
	cfg.NoSync = true
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	s, err := OpenConfig(dir, cfg)
	if err != nil {
		f.Fatal(err)
	}
	if err := s.Save("seed", 7, []byte("some state")); err != nil {
		f.Fatal(err)
	}
	good, err := os.ReadFile(filepath.Join(dir, fileName("seed", 7)))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add(good[:headerLen])
	f.Add([]byte{})
	f.Add(append(bytes.Clone(good), 0))
	f.Fuzz(func(t *testing.T, b []byte) {
		logs.Reset()
		path := filepath.Join(dir, fileName("t", 7))
		if err := os.WriteFile(path, b, 0o644); err != nil {
			t.Fatal(err)
		}
		state, err := s.Load("t", 7)
		ts, latest, ok, lerr := s.Latest("t")
		if lerr != nil {
			t.Fatalf("Latest: %v", lerr)
		}
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Load failed with %v, want a *CorruptError", err)
			}
			if ok {
				t.Fatalf("Latest found state %q at %d in a file Load calls corrupt", latest, ts)
			}
			return
		}
		if !ok || ts != 7 || !bytes.Equal(latest, state) {
			t.Fatalf("Load gave %q; Latest gave %q at %d (%v)", state, latest, ts, ok)
		}
		if err := s.Save("u", 7, state); err != nil {
			t.Fatal(err)
		}
		again, err := os.ReadFile(filepath.Join(dir, fileName("u", 7)))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(again, b) {
			t.Fatalf("a file that loads as %q is not what Save writes for it:\n%x\n%x", state, b, again)
		}
	})
}

// FuzzFileName: a name read from the checkpoint directory parses only if it
// is exactly the name fileName gives what it parses to; and every task
// name and timestamp make a plain file name that parses back to them.
func FuzzFileName(f *testing.F) {
	for _, task := range []string{"0.0", "a@b", "%41", "x/../y", "émoji 🙂", "", "@", ".tmp-x", ".0"} {
		f.Add(fileName(task, 7), task, int64(-1))
	}
	for _, name := range []string{"x@1.ckpt.tmp", ".tmp-x@1.ckpt", "@1.ckpt", "x@+1.ckpt", "x%4@1.ckpt", "x%4g@1.ckpt", "x%@1.ckpt", "a%2Fb@9223372036854775807.ckpt"} {
		f.Add(name, "t", int64(math.MinInt64))
	}
	f.Fuzz(func(t *testing.T, name, task string, ts int64) {
		if pt, pts, ok := parseFileName(name); ok {
			if again := fileName(pt, pts); again != name {
				t.Fatalf("parseFileName(%q) = %q, %d, whose name is %q", name, pt, pts, again)
			}
			if strings.HasPrefix(name, tmpPrefix) {
				t.Fatalf("parseFileName accepted the temporary file %q", name)
			}
		}
		if task == "" {
			return // Save refuses it
		}
		name = fileName(task, ts)
		if strings.ContainsAny(name, "/\\ \x00") || strings.HasPrefix(name, ".") {
			t.Fatalf("file name %q for task %q is not a plain file name", name, task)
		}
		if gt, gts, ok := parseFileName(name); !ok || gt != task || gts != ts {
			t.Fatalf("parseFileName(%q) = %q, %d, %v; want %q, %d", name, gt, gts, ok, task, ts)
		}
	})
}
