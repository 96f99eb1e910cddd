package crcframe

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"
)

// Each layout seals what an independent computation with the standard
// library expects, finds its own frames intact, and notices any one flipped
// bit in the covered header bytes or the body, streamed or not.
func TestSealAndCheck(t *testing.T) {
	layouts := []struct {
		name string
		l    Layout
	}{
		{"wire: big endian, body only", Layout{HeaderLen: 10, LenAt: 2, CRCAt: 6, CoverFrom: 10, CoverTo: 10, BigEndian: true}},
		{"store: little endian, header span", Layout{HeaderLen: 32, LenAt: 4, CRCAt: 28, CoverFrom: 4, CoverTo: 28}},
		{"checkpoint: 8-byte length", Layout{HeaderLen: 24, LenAt: 12, Len64: true, CRCAt: 20, CoverFrom: 4, CoverTo: 20}},
	}
	body := []byte("the body of a frame, a few dozen bytes long")
	for _, tc := range layouts {
		t.Run(tc.name, func(t *testing.T) {
			l := tc.l
			h := make([]byte, l.HeaderLen)
			for i := range h {
				h[i] = byte(i*7 + 1)
			}
			l.Seal(h, body)
			if got := l.BodyLen(h); got != uint64(len(body)) {
				t.Fatalf("BodyLen %d, want %d", got, len(body))
			}
			tab := crc32.MakeTable(crc32.Castagnoli)
			want := crc32.Checksum(append(append([]byte{}, h[l.CoverFrom:l.CoverTo]...), body...), tab)
			var stored uint32
			if l.BigEndian {
				stored = binary.BigEndian.Uint32(h[l.CRCAt:])
			} else {
				stored = binary.LittleEndian.Uint32(h[l.CRCAt:])
			}
			if stored != want || l.Stored(h) != want {
				t.Fatalf("sealed CRC %08x (Stored %08x), want %08x", stored, l.Stored(h), want)
			}
			if _, ok := l.Check(h, body); !ok {
				t.Fatal("a sealed frame does not check")
			}
			d := l.Hash(h)
			d.Write(body[:5])
			d.Write(body[5:])
			if d.Sum32() != want {
				t.Errorf("streamed CRC %08x, want %08x", d.Sum32(), want)
			}
			for i := l.CoverFrom; i < l.CoverTo; i++ {
				h[i] ^= 0x10
				if _, ok := l.Check(h, body); ok {
					t.Errorf("a flipped bit in covered header byte %d went unnoticed", i)
				}
				h[i] ^= 0x10
			}
			for i := range body {
				b := bytes.Clone(body)
				b[i] ^= 1
				if _, ok := l.Check(h, b); ok {
					t.Errorf("a flipped bit in body byte %d went unnoticed", i)
				}
			}
		})
	}
}
