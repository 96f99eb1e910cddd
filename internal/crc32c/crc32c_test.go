package crc32c

import (
	"hash/crc32"
	"math/rand/v2"
	"strconv"
	"testing"
)

var stdTable = crc32.MakeTable(crc32.Castagnoli)

// Under each dispatch this CPU can run (forEachDispatch), every length
// from 0 to 8 KiB and 256 bytes (the 256-bit fold's hybrid takes 2 KiB a
// turn, so this is up to four turns with every tail) and a few long ones,
// at every alignment of the start within 64 bytes, from random and from
// edge CRCs, gives what hash/crc32 gives.
func TestUpdateMatchesHashCRC32(t *testing.T) {
	t.Logf("on this CPU: %s", Method())
	rng := rand.New(rand.NewPCG(1, 2))
	buf := make([]byte, 300_000)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	lengths := []int{65536, 65536 + 17, 131072 - 1, 299_000}
	for n := 0; n <= 8192+256; n++ {
		lengths = append(lengths, n)
	}
	forEachDispatch(t, func(t *testing.T) {
		for _, n := range lengths {
			for _, start := range []int{0, 1, 7, 63} {
				p := buf[start : start+n]
				for _, crc := range []uint32{0, ^uint32(0), rng.Uint32()} {
					if got, want := Update(crc, p), crc32.Update(crc, stdTable, p); got != want {
						t.Fatalf("Update(%08x, %d bytes at %d) = %08x, want %08x", crc, n, start, got, want)
					}
				}
			}
		}
	})
}

// Under each dispatch, an input cut into pieces of random sizes, each piece
// Updated from the CRC of those before it, gives the CRC of the whole: the
// pieces start and end at every alignment and cross every block boundary.
func TestUpdateInPiecesUnderEachDispatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	buf := make([]byte, 200_000)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	forEachDispatch(t, func(t *testing.T) {
		for range 300 {
			start := rng.IntN(64)
			p := buf[start : start+rng.IntN(len(buf)-64)]
			crc := rng.Uint32()
			want := crc32.Update(crc, stdTable, p)
			got, pieces := crc, 0
			for rest := p; len(rest) > 0; pieces++ {
				n := min(len(rest), rng.IntN(10_000))
				got = Update(got, rest[:n])
				rest = rest[n:]
			}
			if got != want {
				t.Fatalf("%d bytes at %d from %08x in %d pieces: %08x, want %08x", len(p), start, crc, pieces, got, want)
			}
		}
	})
}

// The check value of CRC-32C, "123456789" -> 0xe3069283, and a long input
// of zeros and of ones (the all-ones register folds to itself nowhere).
func TestKnownValues(t *testing.T) {
	if got := Update(0, []byte("123456789")); got != 0xe3069283 {
		t.Fatalf("Update(0, 123456789) = %08x, want e3069283", got)
	}
	for _, b := range []byte{0, 0xff} {
		p := make([]byte, 10_000)
		for i := range p {
			p[i] = b
		}
		if got, want := Update(0, p), crc32.Checksum(p, stdTable); got != want {
			t.Fatalf("10,000 bytes of %02x: %08x, want %08x", b, got, want)
		}
	}
}

// Under each dispatch, a single flipped bit anywhere in a long input
// changes the CRC, as it does hash/crc32's (the fold must not lose any lane;
// the length takes the hybrid a turn, then the 256-bit fold a block, then
// leaves a tail to hash/crc32).
func TestEveryBitCounts(t *testing.T) {
	forEachDispatch(t, func(t *testing.T) {
		p := make([]byte, 2048+256+32)
		base := Update(0, p)
		for i := range p {
			for bit := range 8 {
				p[i] ^= 1 << bit
				if got, want := Update(0, p), crc32.Checksum(p, stdTable); got != want || got == base {
					t.Fatalf("bit %d of byte %d flipped: %08x, want %08x (unflipped %08x)", bit, i, got, want, base)
				}
				p[i] ^= 1 << bit
			}
		}
	})
}

// Writing through New in pieces of any size gives the CRC of the whole.
func TestDigestInPieces(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	p := make([]byte, 50_000)
	for i := range p {
		p[i] = byte(rng.Uint32())
	}
	want := crc32.Checksum(p, stdTable)
	d := New()
	for rest := p; len(rest) > 0; {
		n := min(len(rest), rng.IntN(3000))
		d.Write(rest[:n])
		rest = rest[n:]
	}
	if d.Sum32() != want {
		t.Fatalf("in pieces %08x, want %08x", d.Sum32(), want)
	}
	if s := d.Sum(nil); len(s) != Size || uint32(s[0])<<24|uint32(s[1])<<16|uint32(s[2])<<8|uint32(s[3]) != want {
		t.Fatalf("Sum %x, want %08x big endian", s, want)
	}
	d.Reset()
	if d.Sum32() != 0 {
		t.Fatal("Reset left a CRC")
	}
}

func FuzzUpdate(f *testing.F) {
	f.Add(uint32(0), []byte("123456789"))
	f.Add(uint32(1), make([]byte, 600))
	f.Add(^uint32(0), make([]byte, 2049))
	f.Fuzz(func(t *testing.T, crc uint32, p []byte) {
		if got, want := Update(crc, p), crc32.Update(crc, stdTable, p); got != want {
			t.Fatalf("Update(%08x, %d bytes) = %08x, hash/crc32 %08x", crc, len(p), got, want)
		}
	})
}

func BenchmarkUpdate(b *testing.B) {
	for _, n := range []int{256, 512, 1024, 4096, 65536} {
		p := make([]byte, n)
		b.Run("crc32c/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				Update(0, p)
			}
		})
		b.Run("hash-crc32/"+strconv.Itoa(n), func(b *testing.B) {
			b.SetBytes(int64(n))
			for b.Loop() {
				crc32.Checksum(p, stdTable)
			}
		})
	}
}
