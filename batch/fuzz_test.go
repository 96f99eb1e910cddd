package batch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/klauspost/compress/s2"
)

// FuzzDecompress feeds arbitrary blocks and limits to Decompress. It must
// never panic, never return more than the limit, never touch the bytes
// already in dst, return only the package's errors, and agree with s2.Decode
// on every block it accepts.
func FuzzDecompress(f *testing.F) {
	text := textBatch(4096, 20)
	c := NewCompressor(1)
	enc, _ := c.Compress(nil, text)
	seeds := [][]byte{
		enc,
		enc[:len(enc)/2],
		s2.Encode(nil, randomBatch(300, 20)),
		s2.Encode(nil, nil),
		s2.Encode(nil, []byte("a")),
		s2.EncodeBetter(nil, bytes.Repeat([]byte("abcd"), 1000)),
		append(binary.AppendUvarint(nil, 1<<30), 0x00, 'a'),
		{},
		{0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		{8, 0x11, 0x10},
	}
	for _, s := range seeds {
		f.Add(s, uint32(8192))
		f.Add(s, uint32(10))
	}
	f.Fuzz(func(t *testing.T, src []byte, limit uint32) {
		maxLen := int(limit % (1 << 20))
		prefix := []byte("pre")
		out, err := Decompress(prefix, src, maxLen)
		if !bytes.Equal(out[:len(prefix)], []byte("pre")) {
			t.Fatalf("Decompress changed the bytes already in dst")
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("Decompress returned a foreign error %v", err)
			}
			if len(out) != len(prefix) {
				t.Fatalf("Decompress failed but returned %d bytes", len(out)-len(prefix))
			}
			return
		}
		got := out[len(prefix):]
		if len(got) > maxLen {
			t.Fatalf("Decompress returned %d bytes, over the limit %d", len(got), maxLen)
		}
		want, err := s2.Decode(nil, src)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("Decompress accepted a block s2.Decode decodes differently (s2 error %v)", err)
		}
		// What came out must survive a round trip through the Compressor.
		re, ok := NewCompressor(1).Compress(nil, got)
		if !ok {
			return
		}
		back, err := Decompress(nil, re, len(got))
		if err != nil || !bytes.Equal(back, got) {
			t.Fatalf("re-compressed block did not round-trip: %v", err)
		}
	})
}
