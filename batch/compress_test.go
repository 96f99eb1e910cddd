package batch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/s2"
)

// textBatch returns size bytes of 100-byte JSON-like event records, the kind
// of payload a stream-processing job carries: repeated keys, varying values,
// a random session id.
func textBatch(size int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 1))
	events := []string{"click", "view", "scroll", "purchase", "login"}
	pages := []string{"shoes", "books", "garden", "toys", "audio"}
	const hex = "0123456789abcdef"
	out := make([]byte, 0, size+100)
	for len(out) < size {
		rec := fmt.Appendf(nil, `{"ts":%d,"user":"u%05d","ev":"%s","page":"/catalog/%s/%d","ms":%d,"sid":"`,
			1700000000000+r.Int64N(1e6), r.IntN(100000), events[r.IntN(len(events))],
			pages[r.IntN(len(pages))], r.IntN(100000), r.IntN(500))
		for len(rec) < 98 {
			rec = append(rec, hex[r.IntN(16)])
		}
		rec = append(rec[:98], '"', '}')
		out = append(out, rec...)
	}
	return out[:size]
}

func randomBatch(size int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, 2))
	b := make([]byte, size)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func TestCompressRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		src  []byte
	}{
		{"a 64 KiB batch of text records compresses and decodes to the same bytes", textBatch(64<<10, 1)},
		{"a batch exactly at the threshold is tried", textBatch(8<<10, 2)},
		{"a batch of one repeated byte compresses", bytes.Repeat([]byte{'x'}, 100<<10)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCompressor(8 << 10)
			prefix := []byte("hdr:")
			out, ok := c.Compress(prefix, tt.src)
			if !ok {
				t.Fatalf("Compress did not compress %d bytes", len(tt.src))
			}
			if !bytes.HasPrefix(out, prefix) {
				t.Fatalf("Compress lost the bytes already in dst")
			}
			block := out[len(prefix):]
			if len(block) > len(tt.src)-len(tt.src)/8 {
				t.Fatalf("compressed %d bytes to %d, not 1/8 smaller", len(tt.src), len(block))
			}
			dec, err := Decompress([]byte("x"), block, len(tt.src))
			if err != nil {
				t.Fatalf("Decompress: %v", err)
			}
			if dec[0] != 'x' || !bytes.Equal(dec[1:], tt.src) {
				t.Fatalf("round trip changed the batch")
			}
			s := c.Stats()
			if s.Attempts != 1 || s.Compressed != 1 || s.BytesIn != uint64(len(tt.src)) || s.BytesOut != uint64(len(block)) {
				t.Errorf("Stats = %+v", s)
			}
		})
	}
}

func TestCompressSkips(t *testing.T) {
	tests := []struct {
		name      string
		threshold int
		src       []byte
	}{
		{"a batch below the threshold is sent as is", 8 << 10, textBatch(8<<10-1, 3)},
		{"a zero threshold never compresses", 0, textBatch(64<<10, 3)},
		{"a negative threshold never compresses", -1, textBatch(64<<10, 3)},
		{"an incompressible batch is sent as is", 1, randomBatch(64<<10, 3)},
		{"a batch that shrinks by less than 1/8 is sent as is", 1, slightlyCompressible(t, 64<<10)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := NewCompressor(tt.threshold)
			dst := make([]byte, 3, 10)
			out, ok := c.Compress(dst, tt.src)
			if ok {
				t.Fatalf("Compress compressed; want it skipped")
			}
			if len(out) != 3 || &out[:1][0] != &dst[:1][0] {
				t.Fatalf("Compress returned a different dst (len %d)", len(out))
			}
		})
	}
}

// slightlyCompressible returns random bytes with 16 zero bytes in every 128:
// s2 shrinks them, but by less than 1/8.
func slightlyCompressible(t *testing.T, size int) []byte {
	b := randomBatch(size, 4)
	for i := 0; i+16 <= len(b); i += 128 {
		clear(b[i : i+16])
	}
	if e := s2.Encode(nil, b); len(e) >= len(b) || len(e) <= len(b)-len(b)/8 {
		t.Fatalf("slightlyCompressible: s2 encodes %d bytes to %d, want a saving under 1/8", len(b), len(e))
	}
	return b
}

func TestCompressBacksOffOnIncompressibleBatches(t *testing.T) {
	c := NewCompressor(1)
	random := randomBatch(16<<10, 5)
	var tried []int
	for i := range 200 {
		before := c.Stats().Attempts
		c.Compress(nil, random)
		if c.Stats().Attempts != before {
			tried = append(tried, i)
		}
	}
	// Skips of 1, 2, 4, ..., 64, then every 65th batch.
	want := []int{0, 2, 5, 10, 19, 36, 69, 134, 199}
	if fmt.Sprint(tried) != fmt.Sprint(want) {
		t.Fatalf("random batches tried at %v, want %v", tried, want)
	}
	if s := c.Stats(); s.Skipped != 200-uint64(len(want)) || s.Compressed != 0 {
		t.Fatalf("Stats = %+v, want %d skipped and none compressed", s, 200-len(want))
	}
}

func TestCompressBackoffEndsWithACompressibleBatch(t *testing.T) {
	c := NewCompressor(1)
	random := randomBatch(16<<10, 6)
	text := textBatch(16<<10, 6)
	results := make([]bool, 0, 10)
	for i := range 10 {
		src := text
		if i < 3 {
			src = random // tried at 0 and 2; skip 2 after the second miss
		}
		_, ok := c.Compress(nil, src)
		results = append(results, ok)
	}
	// Batches 3 and 4 are skipped, batch 5 is tried and compresses, and from
	// then on every batch is tried again.
	want := []bool{false, false, false, false, false, true, true, true, true, true}
	if fmt.Sprint(results) != fmt.Sprint(want) {
		t.Fatalf("compressed = %v, want %v", results, want)
	}
}

func TestDecompressErrors(t *testing.T) {
	valid := s2.Encode(nil, textBatch(4096, 7))
	bomb := binary.AppendUvarint(nil, 1<<30)
	bomb = append(bomb, 0x00, 'a') // a literal; the rest would be copies
	tests := []struct {
		name    string
		src     []byte
		maxLen  int
		is      error
		message string // "" means do not check
	}{
		{"a decompression bomb is refused before decoding", bomb, 64 << 10, ErrTooLarge, "batch: decompressed size 1073741824 exceeds limit 65536"},
		{"a valid block one byte over the limit is refused", valid, 4095, ErrTooLarge, "batch: decompressed size 4096 exceeds limit 4095"},
		{"a negative limit refuses everything but the empty block", valid, -1, ErrTooLarge, "batch: decompressed size 4096 exceeds limit -1"},
		{"empty input is corrupt", nil, 64 << 10, ErrCorrupt, "batch: corrupt compressed batch"},
		{"an unterminated length varint is corrupt", []byte{0xff, 0xff}, 64 << 10, ErrCorrupt, ""},
		{"a length varint over 32 bits is corrupt", binary.AppendUvarint(nil, 1<<33), math.MaxInt, ErrCorrupt, ""},
		{"a truncated block is corrupt", valid[:len(valid)/2], 64 << 10, ErrCorrupt, ""},
		{"a block whose body is shorter than its header says is corrupt", []byte{10, 0x04, 'a', 'b'}, 64 << 10, ErrCorrupt, ""},
		{"a copy reaching before the start is corrupt", []byte{8, 0x01 | 4<<2, 0x10}, 64 << 10, ErrCorrupt, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dst := []byte("keep")
			out, err := Decompress(dst, tt.src, tt.maxLen)
			if !errors.Is(err, tt.is) {
				t.Fatalf("Decompress error = %v, want %v", err, tt.is)
			}
			if tt.message != "" && err.Error() != tt.message {
				t.Errorf("error text = %q, want %q", err, tt.message)
			}
			if string(out) != "keep" {
				t.Errorf("on error dst became %q, want it unchanged", out)
			}
		})
	}
}

func TestTooLargeErrorCarriesSizes(t *testing.T) {
	_, err := Decompress(nil, s2.Encode(nil, make([]byte, 100)), 99)
	var tl *TooLargeError
	if !errors.As(err, &tl) || tl.Size != 100 || tl.Limit != 99 {
		t.Fatalf("error = %#v, want *TooLargeError{Size: 100, Limit: 99}", err)
	}
	if errors.Is(err, ErrCorrupt) {
		t.Fatalf("a too-large error matches ErrCorrupt")
	}
}

func TestDecompressAtTheLimitAndEmpty(t *testing.T) {
	src := textBatch(1000, 8)
	out, err := Decompress(nil, s2.Encode(nil, src), 1000)
	if err != nil || !bytes.Equal(out, src) {
		t.Fatalf("a block decoding to exactly maxLen: err %v, equal %v", err, bytes.Equal(out, src))
	}
	out, err = Decompress([]byte("a"), s2.Encode(nil, nil), 0)
	if err != nil || string(out) != "a" {
		t.Fatalf("the empty block: %q, %v; want dst unchanged and no error", out, err)
	}
}

func TestCompressAndDecompressReuseBuffers(t *testing.T) {
	c := NewCompressor(1)
	src := textBatch(64<<10, 9)
	enc := make([]byte, 0, 64<<10)
	dec := make([]byte, 0, 64<<10)
	enc, _ = c.Compress(enc, src) // grows the scratch buffer once
	allocs := testing.AllocsPerRun(20, func() {
		var ok bool
		enc, ok = c.Compress(enc[:0], src)
		if !ok {
			t.Fatal("not compressed")
		}
		var err error
		dec, err = Decompress(dec[:0], enc, len(src))
		if err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Compress+Decompress with room in dst allocate %v times, want 0", allocs)
	}
}

func BenchmarkCompress(b *testing.B) {
	for _, in := range []struct {
		name string
		src  []byte
	}{
		{"text-64KiB-100B-msgs", textBatch(64<<10, 10)},
		{"random-64KiB", randomBatch(64<<10, 10)},
	} {
		b.Run(in.name, func(b *testing.B) {
			c := NewCompressor(1)
			dst := make([]byte, 0, s2.MaxEncodedLen(len(in.src)))
			var outLen, sent int
			c.Compress(dst, in.src) // grow the scratch buffer before timing
			b.SetBytes(int64(len(in.src)))
			b.ReportAllocs()
			for b.Loop() {
				out, ok := c.Compress(dst[:0], in.src)
				if ok {
					outLen += len(out)
				} else {
					outLen += len(in.src)
				}
				sent++
			}
			b.ReportMetric(float64(outLen)/float64(sent)/float64(len(in.src)), "ratio")
		})
	}
	// What one attempt on random bytes costs without the backoff.
	b.Run("random-64KiB-every-batch", func(b *testing.B) {
		src := randomBatch(64<<10, 10)
		scratch := make([]byte, s2.MaxEncodedLen(len(src)))
		b.SetBytes(int64(len(src)))
		b.ReportAllocs()
		for b.Loop() {
			s2.Encode(scratch, src)
		}
	})
}

func BenchmarkDecompress(b *testing.B) {
	for _, in := range []struct {
		name string
		src  []byte
	}{
		{"text-64KiB-100B-msgs", textBatch(64<<10, 11)},
		{"random-64KiB", randomBatch(64<<10, 11)}, // a literal-only block
	} {
		b.Run(in.name, func(b *testing.B) {
			block := s2.Encode(nil, in.src)
			dst := make([]byte, 0, len(in.src))
			b.SetBytes(int64(len(in.src)))
			b.ReportAllocs()
			for b.Loop() {
				var err error
				if dst, err = Decompress(dst[:0], block, len(in.src)); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(block))/float64(len(in.src)), "ratio")
		})
	}
}
