package store

import (
	"math"
	"testing"
)

// BenchmarkAppend appends batches of 256 records of 100 bytes, without
// fsync: the cost of encoding, checksumming and the write system call.
func BenchmarkAppend(b *testing.B) {
	const perBatch, size = 256, 100
	l, err := Open(b.TempDir(), Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	recs := make([]Record, perBatch)
	payload := make([]byte, size)
	for i := range recs {
		recs[i].Payload = payload
	}
	ts := int64(0)
	b.SetBytes(perBatch * size)
	b.ReportAllocs()
	for b.Loop() {
		for i := range recs {
			recs[i].Ts = ts
			ts++
		}
		if err := l.Append(recs); err != nil {
			b.Fatal(err)
		}
		// Keep the disk footprint flat, as checkpoints would.
		if ts%(1<<20) == 0 {
			if _, err := l.DeleteBefore(ts); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.N)*perBatch/b.Elapsed().Seconds(), "msgs/s")
}

// BenchmarkReplay replays a 16 MiB log of 100-byte records from the start.
func BenchmarkReplay(b *testing.B) {
	const perBatch, size = 256, 100
	l, err := Open(b.TempDir(), Options{NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	recs := make([]Record, perBatch)
	for i := range recs {
		recs[i].Payload = make([]byte, size)
	}
	for range (16 << 20) / (perBatch * size) {
		if err := l.Append(recs); err != nil {
			b.Fatal(err)
		}
	}
	st := l.Stats()
	b.SetBytes(st.Bytes)
	b.ReportAllocs()
	for b.Loop() {
		if err := l.Replay(math.MinInt64, func([]Record) error { return nil }); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N)*float64(st.Records)/b.Elapsed().Seconds(), "msgs/s")
}
