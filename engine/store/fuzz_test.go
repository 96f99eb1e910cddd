package store

import (
	"bytes"
	"encoding/binary"
	"errors"
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

// sealAll rewrites, in place, the CRC of every batch of b whose header is
// whole and whose claimed body fits, as a writer would have: the fuzzer
// then reaches the record decoding behind the checksum.
func sealAll(b []byte) {
	for len(b) >= headerLen {
		n := batchLayout.BodyLen(b)
		if n > uint64(len(b)-headerLen) {
			return
		}
		batchLayout.Seal(b[:headerLen], b[headerLen:headerLen+int(n)])
		b = b[headerLen+int(n):]
	}
}

// FuzzReplayFrom opens a log whose first, sealed segment holds arbitrary
// batches with valid checksums (and arbitrary magic, counts, timestamps and
// records), followed by an active segment of one good batch, with a sparse
// index entry every 64 bytes. Open either refuses the sealed segment with a
// *CorruptError or keeps all of it; then a Replay from any fromTs, which
// skips ahead by the index and by the batches' claimed timestamps, yields
// exactly the records of a full Replay with Ts >= fromTs, in order.
func FuzzReplayFrom(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s, int64(0))
		f.Add(s, int64(5))
	}
	var many []byte
	for i := range 20 {
		many, _ = appendBatch(many, []Record{{Ts: int64(i * 3), Payload: []byte("abcdefgh")}, {Ts: int64(i*3 + 1)}})
	}
	f.Add(many, int64(30))
	f.Add(many, int64(math.MinInt64))
	f.Fuzz(func(t *testing.T, data []byte, fromTs int64) {
		data = bytes.Clone(data)
		sealAll(data)
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, segmentName(1)), data, 0o644); err != nil {
			t.Fatal(err)
		}
		last, _ := appendBatch(nil, []Record{{Ts: 7, Payload: []byte("last")}})
		if err := os.WriteFile(filepath.Join(dir, segmentName(2)), last, 0o644); err != nil {
			t.Fatal(err)
		}
		l, err := Open(dir, Options{NoSync: true, IndexInterval: 64})
		if err != nil {
			var ce *CorruptError
			if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) || ce.Offset < 0 || ce.Offset > int64(len(data)) {
				t.Fatalf("Open: %v, want a *CorruptError inside the sealed segment", err)
			}
			return
		}
		defer l.Close()
		if l.Recovered() != 0 {
			t.Fatalf("cut %d bytes of the active segment, which is whole", l.Recovered())
		}
		if st := l.Stats(); st.Bytes != int64(len(data)+len(last)) {
			t.Fatalf("kept %d bytes of %d", st.Bytes, len(data)+len(last))
		}
		var all, from []Record
		collect := func(dst *[]Record) func([]Record) error {
			return func(recs []Record) error {
				if len(recs) == 0 || len(recs) > maxRun {
					t.Fatalf("a run of %d records", len(recs))
				}
				for _, r := range recs {
					*dst = append(*dst, Record{Ts: r.Ts, Payload: bytes.Clone(r.Payload)})
				}
				return nil
			}
		}
		if err := l.Replay(math.MinInt64, collect(&all)); err != nil {
			t.Fatalf("Replay of verified data: %v", err)
		}
		if int64(len(all)) != l.Stats().Records {
			t.Fatalf("replayed %d records, stats say %d", len(all), l.Stats().Records)
		}
		if err := l.Replay(fromTs, collect(&from)); err != nil {
			t.Fatalf("Replay from %d: %v", fromTs, err)
		}
		var want []Record
		for _, r := range all {
			if r.Ts >= fromTs {
				want = append(want, r)
			}
		}
		if len(want) != len(from) {
			t.Fatalf("Replay from %d gave %d records, want %d", fromTs, len(from), len(want))
		}
		for i := range want {
			if want[i].Ts != from[i].Ts || !bytes.Equal(want[i].Payload, from[i].Payload) {
				t.Fatalf("Replay from %d: record %d is %d %q, want %d %q", fromTs, i, from[i].Ts, from[i].Payload, want[i].Ts, want[i].Payload)
			}
		}
	})
}
