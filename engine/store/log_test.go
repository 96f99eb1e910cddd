package store

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
)

// written remembers what a test appended: the records of each batch and
// where the batch ended on disk.
type written struct {
	batches [][]Record
	seq     []uint64 // segment of each batch
	end     []int64  // offset just past each batch in its segment
}

func (w *written) all() []Record {
	var out []Record
	for _, b := range w.batches {
		out = append(out, b...)
	}
	return out
}

func (w *written) from(ts int64) []Record {
	var out []Record
	for _, r := range w.all() {
		if r.Ts >= ts {
			out = append(out, r)
		}
	}
	return out
}

// randomBatch makes 1..maxRecs records with payloads of 0..maxLen bytes and
// timestamps around base, not monotone.
func randomBatch(rng *rand.Rand, base int64, maxRecs, maxLen int) []Record {
	recs := make([]Record, 1+rng.IntN(maxRecs))
	for i := range recs {
		p := make([]byte, rng.IntN(maxLen+1))
		for j := range p {
			p[j] = byte(rng.Uint32())
		}
		recs[i] = Record{Ts: base + int64(rng.IntN(20)) - 5, Payload: p}
	}
	return recs
}

// appendN appends n random batches with slowly increasing timestamps.
func appendN(t testing.TB, l *Log, w *written, rng *rand.Rand, n int) {
	t.Helper()
	for range n {
		base := int64(len(w.batches)) * 3
		recs := randomBatch(rng, base, 8, 40)
		if err := l.Append(recs); err != nil {
			t.Fatal(err)
		}
		l.mu.Lock()
		act := l.mu.segs[len(l.mu.segs)-1]
		l.mu.Unlock()
		w.batches = append(w.batches, recs)
		w.seq = append(w.seq, act.seq)
		w.end = append(w.end, act.size)
	}
}

// replayAll collects a replay, copying payloads out of the read buffer.
func replayAll(t testing.TB, l *Log, from int64) []Record {
	t.Helper()
	var out []Record
	err := l.Replay(from, func(recs []Record) error {
		if len(recs) == 0 || len(recs) > maxRun {
			return fmt.Errorf("run of %d records", len(recs))
		}
		for _, r := range recs {
			out = append(out, Record{Ts: r.Ts, Payload: bytes.Clone(r.Payload)})
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Replay(%d): %v", from, err)
	}
	return out
}

func sameRecords(t testing.TB, what string, got, want []Record) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %d records, want %d", what, len(got), len(want))
	}
	for i := range got {
		if got[i].Ts != want[i].Ts || !bytes.Equal(got[i].Payload, want[i].Payload) {
			t.Fatalf("%s: record %d is {%d %x}, want {%d %x}", what, i, got[i].Ts, got[i].Payload, want[i].Ts, want[i].Payload)
		}
	}
}

var smallSegments = Options{SegmentBytes: 1 << 10, IndexInterval: 128, NoSync: true}

func TestRecordsAppendedAcrossSeveralSegmentsReplayInOrderBeforeAndAfterReopen(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, smallSegments)
	if err != nil {
		t.Fatal(err)
	}
	var w written
	appendN(t, l, &w, rand.New(rand.NewPCG(1, 2)), 300)
	st := l.Stats()
	if st.Segments < 5 {
		t.Fatalf("want several segments, got %+v", st)
	}
	if st.Batches != 300 || st.Records != int64(len(w.all())) {
		t.Fatalf("stats %+v, want 300 batches and %d records", st, len(w.all()))
	}
	sameRecords(t, "before reopen", replayAll(t, l, math.MinInt64), w.all())
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}

	l, err = Open(dir, smallSegments)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if l.Recovered() != 0 {
		t.Fatalf("clean reopen cut %d bytes", l.Recovered())
	}
	if got := l.Stats(); got != st {
		t.Fatalf("stats after reopen %+v, want %+v", got, st)
	}
	sameRecords(t, "after reopen", replayAll(t, l, math.MinInt64), w.all())
}

func TestReplayFromAnyTimestampReturnsExactlyTheRecordsAtOrAfterIt(t *testing.T) {
	for _, name := range []string{"live", "reopened"} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			l, err := Open(dir, smallSegments)
			if err != nil {
				t.Fatal(err)
			}
			var w written
			appendN(t, l, &w, rand.New(rand.NewPCG(3, 4)), 120)
			if name == "reopened" {
				l.Close()
				if l, err = Open(dir, smallSegments); err != nil {
					t.Fatal(err)
				}
			}
			defer l.Close()
			froms := []int64{math.MinInt64, math.MaxInt64, 0}
			for _, r := range w.all() {
				froms = append(froms, r.Ts-1, r.Ts, r.Ts+1)
			}
			slices.Sort(froms)
			for _, from := range slices.Compact(froms) {
				sameRecords(t, fmt.Sprintf("from %d", from), replayAll(t, l, from), w.from(from))
			}
		})
	}
}

func TestTheSparseIndexSkipsTheStartOfASegmentWhoseOldRecordsAreAllOlder(t *testing.T) {
	l, err := Open(t.TempDir(), Options{IndexInterval: 64, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for ts := range int64(100) {
		if err := l.Append([]Record{{Ts: ts, Payload: make([]byte, 50)}}); err != nil {
			t.Fatal(err)
		}
	}
	l.mu.Lock()
	s := l.mu.segs[0]
	l.mu.Unlock()
	if len(s.index) < 50 {
		t.Fatalf("want an index entry about every batch, got %d", len(s.index))
	}
	if off := s.startFor(60); off < 50*(headerLen+50) {
		t.Fatalf("replay from 60 starts at offset %d, want past the first 50 batches", off)
	}
	if off := s.startFor(math.MinInt64); off != 0 {
		t.Fatalf("replay from the start begins at %d", off)
	}
}

func TestExtremeTimestampsShareABatch(t *testing.T) {
	l, err := Open(t.TempDir(), Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	recs := []Record{{Ts: math.MaxInt64, Payload: []byte("late")}, {Ts: math.MinInt64}, {Ts: 0, Payload: []byte("zero")}}
	if err := l.Append(recs); err != nil {
		t.Fatal(err)
	}
	sameRecords(t, "all", replayAll(t, l, math.MinInt64), recs)
	sameRecords(t, "from 0", replayAll(t, l, 0), []Record{recs[0], recs[2]})
	sameRecords(t, "from max", replayAll(t, l, math.MaxInt64), recs[:1])
}

// copyDir copies the segment files of src into a new directory.
func copyDir(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// crashFixture writes batches over three small segments and closes the log.
func crashFixture(t *testing.T) (dir string, w *written, last string) {
	dir = t.TempDir()
	opts := Options{SegmentBytes: 600, IndexInterval: 64, NoSync: true}
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	w = &written{}
	rng := rand.New(rand.NewPCG(5, 6))
	for l.Stats().Segments < 3 {
		appendN(t, l, w, rng, 1)
	}
	// Reopen with room for more batches in the last segment (segment size
	// is not a property of the directory).
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l, err = Open(dir, Options{NoSync: true}); err != nil {
		t.Fatal(err)
	}
	appendN(t, l, w, rng, 6)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return dir, w, filepath.Join(dir, segmentName(w.seq[len(w.seq)-1]))
}

// survivors are the batches wholly before byte cut of the last segment.
func (w *written) survivors(cut int64) []Record {
	lastSeq := w.seq[len(w.seq)-1]
	var out []Record
	for i, b := range w.batches {
		if w.seq[i] < lastSeq || w.end[i] <= cut {
			out = append(out, b...)
		}
	}
	return out
}

func TestACrashAtAnyByteOfTheLastSegmentKeepsEveryCompleteBatchAndNothingAfter(t *testing.T) {
	dir, w, last := crashFixture(t)
	fi, err := os.Stat(last)
	if err != nil {
		t.Fatal(err)
	}
	full, err := os.ReadFile(last)
	if err != nil {
		t.Fatal(err)
	}
	// The sealed segments are never touched (appends after recovery go to
	// the last one), so one copy of the directory serves every cut.
	d := copyDir(t, dir)
	p := filepath.Join(d, filepath.Base(last))
	for cut := int64(0); cut <= fi.Size(); cut++ {
		if err := os.WriteFile(p, full[:cut], 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := Open(d, Options{NoSync: true})
		if err != nil {
			t.Fatalf("cut at %d: Open: %v", cut, err)
		}
		want := w.survivors(cut)
		sameRecords(t, fmt.Sprintf("cut at %d", cut), replayAll(t, l, math.MinInt64), want)
		kept := l.Stats().Bytes
		// What was cut is exactly the partial batch.
		var whole int64
		for i := range w.batches {
			if w.seq[i] == w.seq[len(w.seq)-1] && w.end[i] <= cut {
				whole = w.end[i]
			}
		}
		if l.Recovered() != cut-whole {
			t.Fatalf("cut at %d: Recovered() = %d, want %d", cut, l.Recovered(), cut-whole)
		}
		// The log goes on from the cut.
		extra := []Record{{Ts: 1 << 40, Payload: []byte("after the crash")}}
		if err := l.Append(extra); err != nil {
			t.Fatal(err)
		}
		sameRecords(t, "appended after recovery", replayAll(t, l, 1<<40), extra)
		if l.Stats().Bytes <= kept {
			t.Fatal("append after recovery did not grow the log")
		}
		l.Close()
	}
}

func TestAFlippedByteInTheTailBatchCutsThatBatch(t *testing.T) {
	dir, w, last := crashFixture(t)
	n := len(w.batches)
	start, end := w.end[n-2], w.end[n-1]
	if w.seq[n-2] != w.seq[n-1] {
		t.Fatal("fixture: the last two batches should share a segment")
	}
	full, err := os.ReadFile(last)
	if err != nil {
		t.Fatal(err)
	}
	d := copyDir(t, dir)
	p := filepath.Join(d, filepath.Base(last))
	for off := start; off < end; off++ {
		b := bytes.Clone(full)
		b[off] ^= 0x5a
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := Open(d, Options{NoSync: true})
		if err != nil {
			t.Fatalf("flip at %d: %v", off, err)
		}
		sameRecords(t, fmt.Sprintf("flip at %d", off), replayAll(t, l, math.MinInt64), w.survivors(start))
		if l.Recovered() != end-start {
			t.Fatalf("flip at %d: cut %d bytes, want %d", off, l.Recovered(), end-start)
		}
		l.Close()
	}
}

func TestAFlippedByteInAMiddleBatchOfTheLastSegmentCutsFromThere(t *testing.T) {
	dir, w, last := crashFixture(t)
	n := len(w.batches)
	off := w.end[n-4] + headerLen // first body byte of the fourth batch from the end
	b, err := os.ReadFile(last)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 1
	if err := os.WriteFile(last, b, 0o644); err != nil {
		t.Fatal(err)
	}
	l, err := Open(dir, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sameRecords(t, "after flip", replayAll(t, l, math.MinInt64), w.survivors(w.end[n-4]))
}

func TestCorruptionInASealedSegmentIsAnErrorNotACut(t *testing.T) {
	dir, w, _ := crashFixture(t)
	first := filepath.Join(dir, segmentName(w.seq[0]))
	b, err := os.ReadFile(first)
	if err != nil {
		t.Fatal(err)
	}
	b[headerLen+1] ^= 0xff
	if err := os.WriteFile(first, b, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Open(dir, Options{NoSync: true})
	var ce *CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open: %v, want a *CorruptError", err)
	}
	if ce.Segment != first || ce.Offset != 0 || ce.Reason != string(errBadCRC) {
		t.Fatalf("error %+v", ce)
	}
}

func TestDeleteBeforeRemovesOnlySealedSegmentsWhoseRecordsAreAllOlder(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, smallSegments)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var w written
	appendN(t, l, &w, rand.New(rand.NewPCG(7, 8)), 200)
	before := l.Stats()

	l.mu.Lock()
	segs := slices.Clone(l.mu.segs)
	l.mu.Unlock()
	cutTs := segs[len(segs)/2].maxTs + 1
	wantGone := 0
	for _, s := range segs[:len(segs)-1] {
		if s.maxTs < cutTs {
			wantGone++
		}
	}

	removed, err := l.DeleteBefore(cutTs)
	if err != nil {
		t.Fatal(err)
	}
	if removed != wantGone || removed == 0 {
		t.Fatalf("removed %d segments, want %d", removed, wantGone)
	}
	if got := l.Stats().Segments; got != before.Segments-removed {
		t.Fatalf("%d segments left, want %d", got, before.Segments-removed)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*"+segmentExt))
	if len(files) != before.Segments-removed {
		t.Fatalf("%d segment files on disk, want %d", len(files), before.Segments-removed)
	}
	sameRecords(t, "replay from the deletion point", replayAll(t, l, cutTs), w.from(cutTs))

	// Deleting everything still keeps the active segment.
	if _, err := l.DeleteBefore(math.MaxInt64); err != nil {
		t.Fatal(err)
	}
	if got := l.Stats().Segments; got != 1 {
		t.Fatalf("%d segments after deleting all, want the active one", got)
	}
	if err := l.Append([]Record{{Ts: 1}}); err != nil {
		t.Fatal(err)
	}
}

func TestAReopenedLogContinuesAppendingInANewOrTheSameSegment(t *testing.T) {
	dir := t.TempDir()
	var w written
	rng := rand.New(rand.NewPCG(9, 10))
	for round := range 5 {
		l, err := Open(dir, smallSegments)
		if err != nil {
			t.Fatal(err)
		}
		sameRecords(t, fmt.Sprintf("round %d", round), replayAll(t, l, math.MinInt64), w.all())
		appendN(t, l, &w, rng, 30)
		if err := l.Close(); err != nil {
			t.Fatal(err)
		}
	}
	l, err := Open(dir, smallSegments)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	sameRecords(t, "final", replayAll(t, l, math.MinInt64), w.all())
}

func TestReplayHandsALargeBatchOverInBoundedRunsAndStopsOnTheCallbacksError(t *testing.T) {
	l, err := Open(t.TempDir(), Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	recs := make([]Record, 2500)
	for i := range recs {
		recs[i] = Record{Ts: int64(i), Payload: []byte{byte(i)}}
	}
	if err := l.Append(recs); err != nil {
		t.Fatal(err)
	}
	var runs []int
	if err := l.Replay(0, func(r []Record) error { runs = append(runs, len(r)); return nil }); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(runs, []int{1024, 1024, 452}) {
		t.Fatalf("runs %v", runs)
	}
	// Every run carries its own records, from any starting point.
	sameRecords(t, "replay of a large batch", replayAll(t, l, 0), recs)
	sameRecords(t, "replay of a large batch from 1500", replayAll(t, l, 1500), recs[1500:])
	stop := errors.New("stop")
	calls := 0
	err = l.Replay(0, func([]Record) error { calls++; return stop })
	if err != stop || calls != 1 {
		t.Fatalf("Replay returned %v after %d calls, want the callback's error after 1", err, calls)
	}
}

func TestAppendRejectsABatchOverTheLimitAndAClosedLogRefusesEverything(t *testing.T) {
	l, err := Open(t.TempDir(), Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Append([]Record{{Payload: make([]byte, MaxBatchBytes+1)}}); !errors.Is(err, ErrBatchTooLarge) {
		t.Fatalf("oversized batch: %v", err)
	}
	if err := l.Append(nil); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
	if st := l.Stats(); st.Batches != 0 {
		t.Fatalf("rejected batches were written: %+v", st)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"Append":       l.Append([]Record{{}}),
		"Sync":         l.Sync(),
		"Replay":       l.Replay(0, func([]Record) error { return nil }),
		"Close":        l.Close(),
		"DeleteBefore": func() error { _, err := l.DeleteBefore(0); return err }(),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
}

func TestReplayRunsConcurrentlyWithAppendAndSeesAPrefix(t *testing.T) {
	l, err := Open(t.TempDir(), smallSegments)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	const n = 300
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			if err := l.Append([]Record{{Ts: int64(i), Payload: []byte{byte(i)}}}); err != nil {
				t.Error(err)
				return
			}
			if i%50 == 0 {
				if _, err := l.DeleteBefore(-1); err != nil {
					t.Error(err)
				}
			}
		}
	}()
	for range 20 {
		got := replayAll(t, l, 0)
		for i, r := range got {
			if r.Ts != int64(i) || r.Payload[0] != byte(i) {
				t.Fatalf("replay during appends: record %d is %+v", i, r)
			}
		}
	}
	wg.Wait()
	if got := replayAll(t, l, 0); len(got) != n {
		t.Fatalf("replayed %d, want %d", len(got), n)
	}
}

func TestSyncMakesTheActiveSegmentDurable(t *testing.T) {
	// Not observable without a crash; this checks Sync and Close succeed with
	// fsync enabled and that the directory survives a reopen.
	dir := t.TempDir()
	l, err := Open(dir, Options{SegmentBytes: 256})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := l.Append([]Record{{Ts: int64(i), Payload: make([]byte, 100)}}); err != nil {
			t.Fatal(err)
		}
		if err := l.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if st := l.Stats(); st.Records != 10 || st.Segments < 5 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSyncDuringAppendsAndRollsWithBackgroundFsyncsLosesNothingAndNeverFails(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{SegmentBytes: 4096, SyncAhead: 700})
	if err != nil {
		t.Fatal(err)
	}
	const n = 400
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			// A roll may seal the file Sync is fsyncing: that is success,
			// the roll fsynced it.
			if err := l.Sync(); err != nil {
				t.Errorf("sync during appends: %v", err)
				return
			}
		}
	}()
	for i := range n {
		if err := l.Append([]Record{{Ts: int64(i), Payload: bytes.Repeat([]byte{byte(i)}, 90)}}); err != nil {
			t.Fatal(err)
		}
	}
	close(done)
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if l.mu.syncing {
		t.Fatal("a background fsync outlived Close")
	}
	l, err = Open(dir, Options{SegmentBytes: 4096})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := replayAll(t, l, 0)
	if len(got) != n {
		t.Fatalf("replayed %d records, want %d", len(got), n)
	}
	for i, r := range got {
		if r.Ts != int64(i) || len(r.Payload) != 90 || r.Payload[0] != byte(i) {
			t.Fatalf("record %d is ts %d, %d bytes", i, r.Ts, len(r.Payload))
		}
	}
	if st := l.Stats(); st.Segments < 5 {
		t.Fatalf("%d segments: the test did not roll", st.Segments)
	}
}

func TestDeleteBeforeDuringAppendsKeepsEveryRecordAtOrAfterItsTimestamp(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{SegmentBytes: 2048})
	if err != nil {
		t.Fatal(err)
	}
	const n = 600
	var cut atomic.Int64
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := range n {
			if err := l.Append([]Record{{Ts: int64(i), Payload: bytes.Repeat([]byte{byte(i)}, 60)}}); err != nil {
				t.Error(err)
				return
			}
			if i%40 == 0 {
				cut.Store(int64(i / 2))
			}
		}
	}()
	deleted := 0
	for range 50 {
		d, err := l.DeleteBefore(cut.Load())
		if err != nil {
			t.Fatal(err)
		}
		deleted += d
	}
	wg.Wait()
	last := cut.Load()
	d, err := l.DeleteBefore(last)
	if err != nil {
		t.Fatal(err)
	}
	if deleted += d; deleted == 0 {
		t.Fatal("no segment was deleted")
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, err = Open(dir, Options{SegmentBytes: 2048})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	got := replayAll(t, l, last)
	if len(got) != n-int(last) {
		t.Fatalf("replayed %d records from %d, want %d", len(got), last, n-int(last))
	}
	for i, r := range got {
		if r.Ts != last+int64(i) || r.Payload[0] != byte(r.Ts) {
			t.Fatalf("record %d is ts %d", i, r.Ts)
		}
	}
}

// TestAWritebackErrorTakenByABackgroundFsyncFailsSyncAndEveryLaterCall:
// Linux reports a writeback error to one fsync of a file description only.
// When the background fsync that Append starts takes it, Sync's own fsync
// of the same file succeeds; Sync must still fail with the background
// fsync's error, and so must every later Append, Sync and Close.
func TestAWritebackErrorTakenByABackgroundFsyncFailsSyncAndEveryLaterCall(t *testing.T) {
	l, err := Open(t.TempDir(), Options{SyncAhead: 1})
	if err != nil {
		t.Fatal(err)
	}
	bgStarted, release, ownRan := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	l.fsync = func(f *os.File) error {
		switch calls.Add(1) {
		case 1: // the background fsync: it takes the error, once released
			close(bgStarted)
			<-release
			return syscall.EIO
		case 2: // Sync's own fsync: the error was reported already
			close(ownRan)
		}
		return f.Sync()
	}
	if err := l.Append([]Record{{Ts: 1, Payload: []byte("lost")}}); err != nil {
		t.Fatal(err)
	}
	<-bgStarted
	synced := make(chan error, 1)
	go func() { synced <- l.Sync() }()
	<-ownRan
	close(release)
	if err := <-synced; !errors.Is(err, syscall.EIO) {
		t.Fatalf("Sync returned %v while the background fsync of what it covers failed; want EIO", err)
	}
	if err := l.Append([]Record{{Ts: 2}}); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Append after the failed fsync returned %v, want EIO", err)
	}
	if err := l.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("a second Sync returned %v, want EIO", err)
	}
	if err := l.Close(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Close returned %v, want EIO", err)
	}
}

// TestAFailedFsyncWhenSealingASegmentFailsThatAppendAndEveryLaterCall: the
// fsync that seals a full segment fails. The Append that rolled fails; the
// next one must not roll again over a segment whose data may be lost (its
// fsync would succeed, the error having been reported), nor may a Sync or
// Close succeed.
func TestAFailedFsyncWhenSealingASegmentFailsThatAppendAndEveryLaterCall(t *testing.T) {
	l, err := Open(t.TempDir(), Options{SegmentBytes: 256, SyncAhead: -1})
	if err != nil {
		t.Fatal(err)
	}
	rec := []Record{{Ts: 1, Payload: make([]byte, 200)}}
	if err := l.Append(rec); err != nil {
		t.Fatal(err)
	}
	var fail atomic.Bool
	fail.Store(true)
	l.fsync = func(f *os.File) error {
		if fail.Swap(false) {
			return syscall.EIO
		}
		return f.Sync()
	}
	if err := l.Append(rec); !errors.Is(err, syscall.EIO) {
		t.Fatalf("the Append whose roll failed to fsync returned %v, want EIO", err)
	}
	if err := l.Append(rec); !errors.Is(err, syscall.EIO) {
		t.Fatalf("the next Append returned %v, want EIO", err)
	}
	if st := l.Stats(); st.Segments != 1 || st.Batches != 1 {
		t.Fatalf("after the failed roll the log has %d segments and %d batches; want the first segment unsealed with its one batch", st.Segments, st.Batches)
	}
	if err := l.Sync(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Sync returned %v, want EIO", err)
	}
	if err := l.Close(); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Close returned %v, want EIO", err)
	}
}

// TestAFailedFsyncMakesEveryLaterOpenRefuseTheLog: once an fsync of a log
// has failed, records it acknowledged may be missing from disk although
// they read back from the page cache, and the fsync that took the error
// does not report it again. A process that dies right after the failure,
// before anyone acted on its error, must not leave a log that the next
// process opens as whole: Open refuses it with ErrSyncFailed, naming the
// failure, whether the failed fsync was Close's, Sync's, a background one
// or the one that seals a segment.
func TestAFailedFsyncMakesEveryLaterOpenRefuseTheLog(t *testing.T) {
	rec := []Record{{Ts: 1, Payload: make([]byte, 200)}}
	tests := []struct {
		name string
		opts Options
		// fail makes the log hit the failing fsync and returns the error
		// of that call.
		fail func(l *Log) error
	}{
		{"Close", Options{SyncAhead: -1}, func(l *Log) error { return l.Close() }},
		{"Sync", Options{SyncAhead: -1}, func(l *Log) error { return l.Sync() }},
		{"a background fsync", Options{SyncAhead: 1}, func(l *Log) error {
			return l.Sync() // waits for the one the first Append started, and takes its error
		}},
		{"sealing a segment", Options{SegmentBytes: 256, SyncAhead: -1}, func(l *Log) error { return l.Append(rec) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			l, err := Open(dir, tt.opts)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			failFirstFsync(l)
			if err := l.Append(rec); err != nil {
				t.Fatal(err)
			}
			if err := tt.fail(l); !errors.Is(err, syscall.EIO) {
				t.Fatalf("the call whose fsync failed returned %v, want EIO", err)
			}
			// The process dies here: the next one opens the directory.
			again, err := Open(dir, tt.opts)
			if err == nil {
				again.Close()
				t.Fatal("a log whose fsync failed opens again as if nothing were lost")
			}
			if !errors.Is(err, ErrSyncFailed) || !strings.Contains(err.Error(), syscall.EIO.Error()) {
				t.Fatalf("Open after the failed fsync returned %v; want ErrSyncFailed naming the fsync's error", err)
			}
		})
	}
}

// TestALogThatNeverFailedAnFsyncOpensAgainAfterACrash: a process that dies
// with its log open (no Close) leaves nothing that makes the next Open
// refuse it: only a failed fsync does.
func TestALogThatNeverFailedAnFsyncOpensAgainAfterACrash(t *testing.T) {
	dir := t.TempDir()
	l, err := Open(dir, Options{SyncAhead: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Append([]Record{{Ts: 1, Payload: []byte("kept")}}); err != nil {
		t.Fatal(err)
	}
	if err := l.Sync(); err != nil {
		t.Fatal(err)
	}
	again, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("Open after a crash without a failed fsync: %v", err)
	}
	defer again.Close()
	sameRecords(t, "after the crash", replayAll(t, again, math.MinInt64), []Record{{Ts: 1, Payload: []byte("kept")}})
}

// TestEveryCallAfterAFailedFsyncSaysTheFsyncFailed: once an fsync of the
// log has failed (a background one, or the one that seals a segment),
// every later Append and Sync fails with an error wrapping ErrSyncFailed,
// as Open of the directory does, so that the caller can tell a log that
// may have lost records from a write that failed and was undone. The
// errors used to wrap only the fsync's own error.
func TestEveryCallAfterAFailedFsyncSaysTheFsyncFailed(t *testing.T) {
	rec := []Record{{Ts: 1, Payload: make([]byte, 200)}}
	for name, opts := range map[string]Options{
		"a background fsync": {SyncAhead: 1},
		"sealing a segment":  {SegmentBytes: 256, SyncAhead: -1},
	} {
		t.Run(name, func(t *testing.T) {
			l, err := Open(t.TempDir(), opts)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			failed := failFirstFsync(l)
			if err := l.Append(rec); err != nil {
				t.Fatal(err)
			}
			l.ahead.Wait()    // with SyncAhead, the first Append's background fsync failed
			_ = l.Append(rec) // else this one's roll fails to fsync
			if !failed.Load() {
				t.Fatal("no fsync failed")
			}
			if err := l.Append(rec); !errors.Is(err, ErrSyncFailed) || !errors.Is(err, syscall.EIO) {
				t.Fatalf("Append after the failed fsync returned %v; want ErrSyncFailed wrapping EIO", err)
			}
			if err := l.Sync(); !errors.Is(err, ErrSyncFailed) || !errors.Is(err, syscall.EIO) {
				t.Fatalf("Sync after the failed fsync returned %v; want ErrSyncFailed wrapping EIO", err)
			}
		})
	}
}

// failFirstFsync makes l's first fsync fail with EIO, and the later ones
// sync; the flag it returns is set once one failed.
func failFirstFsync(l *Log) *atomic.Bool {
	failed := new(atomic.Bool)
	l.fsync = func(f *os.File) error {
		if failed.CompareAndSwap(false, true) {
			return syscall.EIO
		}
		return f.Sync()
	}
	return failed
}
