package store

import (
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// fuzzSeeds are segment files: valid ones, torn ones, and headers whose
// claimed lengths or counts are absurd.
func fuzzSeeds() [][]byte {
	one, _ := appendBatch(nil, []Record{{Ts: 5, Payload: []byte("hello")}, {Ts: -3}})
	two, _ := appendBatch(append([]byte(nil), one...), []Record{{Ts: math.MaxInt64, Payload: make([]byte, 300)}})
	huge := append([]byte(nil), one[:headerLen]...)
	binary.LittleEndian.PutUint32(huge[4:8], math.MaxUint32)
	atLimit := append([]byte(nil), one[:headerLen]...)
	binary.LittleEndian.PutUint32(atLimit[4:8], MaxBatchBytes)
	manyRecs := append([]byte(nil), one...)
	binary.LittleEndian.PutUint32(manyRecs[8:12], math.MaxUint32)
	return [][]byte{
		nil,
		one,
		two,
		two[:len(two)-1],
		two[:len(one)+headerLen-1],
		huge,
		atLimit,
		append(append([]byte(nil), one...), huge...),
		manyRecs,
		[]byte("SLB1"),
	}
}

// FuzzOpenSegment opens a directory whose only segment holds arbitrary
// bytes. Open must not fail or panic; what it keeps plus what it cuts is the
// whole file; the kept part replays; and memory stays bounded by the file's
// real size, whatever lengths its headers claim.
func FuzzOpenSegment(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, segmentName(1)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		before := ms.TotalAlloc

		l, err := Open(dir, Options{NoSync: true})
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		defer l.Close()
		st := l.Stats()
		if st.Bytes+l.Recovered() != int64(len(data)) {
			t.Fatalf("kept %d + cut %d != file %d", st.Bytes, l.Recovered(), len(data))
		}
		var n int64
		if err := l.Replay(math.MinInt64, func(recs []Record) error {
			n += int64(len(recs))
			return nil
		}); err != nil {
			t.Fatalf("Replay of verified data: %v", err)
		}
		if n != st.Records {
			t.Fatalf("replayed %d records, stats say %d", n, st.Records)
		}

		runtime.ReadMemStats(&ms)
		if alloc := ms.TotalAlloc - before; alloc > 1<<20+3*uint64(len(data)) {
			t.Fatalf("Open and Replay of a %d-byte segment allocated %d bytes", len(data), alloc)
		}

		// The recovered log accepts and replays new batches.
		if err := l.Append([]Record{{Ts: 1, Payload: []byte("x")}}); err != nil {
			t.Fatal(err)
		}
		if got := l.Stats().Records; got != st.Records+1 {
			t.Fatalf("after append %d records, want %d", got, st.Records+1)
		}
	})
}
