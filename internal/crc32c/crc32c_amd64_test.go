package crc32c

import (
	"hash/crc32"
	"math/rand/v2"
	"testing"

	"golang.org/x/sys/cpu"
)

// Each fold this CPU can run, whichever update chose, gives hash/crc32's
// CRC on every multiple of its block to 16 KiB and on 64 KiB, from random
// CRCs and at an odd alignment.
func TestEachFoldMatchesHashCRC32(t *testing.T) {
	folds := map[string]func(uint32, []byte, *foldKeys) uint32{}
	if cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VPCLMULQDQ {
		folds["AVX-512"] = foldAVX512
	}
	if cpu.X86.HasAVX2 && hasVPCLMULQDQ() {
		folds["AVX2"] = foldAVX2
		folds["hybrid"] = foldHybrid
	}
	if len(folds) == 0 || !cpu.X86.HasSSE42 {
		t.Skip("this CPU has no VPCLMULQDQ: Update is hash/crc32")
	}
	rng := rand.New(rand.NewPCG(5, 6))
	buf := make([]byte, 65536+3)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	lengths := []int{65536}
	for n := foldBlock; n <= 16384; n += foldBlock {
		lengths = append(lengths, n)
	}
	for name, fold := range folds {
		for _, n := range lengths {
			if name == "hybrid" && n%hybridBlock != 0 {
				continue
			}
			p := buf[3 : 3+n]
			crc := rng.Uint32()
			if got, want := ^fold(^crc, p, &keys), crc32.Update(crc, stdTable, p); got != want {
				t.Fatalf("%s fold of %d bytes from %08x: %08x, want %08x", name, n, crc, got, want)
			}
		}
		t.Logf("%s fold checked", name)
	}
}

func BenchmarkFold(b *testing.B) {
	p := make([]byte, 65536)
	for _, f := range []struct {
		name string
		ok   bool
		fold func(uint32, []byte, *foldKeys) uint32
	}{
		{"AVX-512", cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VPCLMULQDQ, foldAVX512},
		{"AVX2", cpu.X86.HasAVX2 && hasVPCLMULQDQ(), foldAVX2},
		{"hybrid", cpu.X86.HasAVX2 && hasVPCLMULQDQ(), foldHybrid},
	} {
		b.Run(f.name+"/65536", func(b *testing.B) {
			if !f.ok {
				b.Skip("not on this CPU")
			}
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				f.fold(0, p, &keys)
			}
		})
	}
}

// forEachDispatch runs f once for each way update can compute on this CPU,
// with the dispatch set as a CPU that has only those features would set it
// (Method names it), so that a path that only some CPU models take is
// checked on every CPU that can run it, not only on those that choose it.
// Each run is a subtest named after the method; a method this CPU cannot
// run is logged, not run.
func forEachDispatch(t *testing.T, f func(t *testing.T)) {
	defer func(f512, f bool) { fold512, folding = f512, f }(fold512, folding)
	for _, d := range []struct {
		method        string
		ok            bool
		fold512, fold bool
	}{
		{"512-bit fold", cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VPCLMULQDQ && cpu.X86.HasSSE42, true, true},
		{"256-bit fold with CRC32 streams", cpu.X86.HasAVX2 && hasVPCLMULQDQ() && cpu.X86.HasSSE42, false, true},
		{"hash/crc32", true, false, false},
	} {
		if !d.ok {
			t.Logf("%s: not on this CPU", d.method)
			continue
		}
		fold512, folding = d.fold512, d.fold
		if Method() != d.method {
			t.Fatalf("dispatch set for %q reports %q", d.method, Method())
		}
		t.Run(d.method, f)
	}
}

// Update as it runs where AVX-512 is missing or hidden (the hybrid fold,
// then the 256-bit fold, then hash/crc32), checked on a CPU that has
// AVX-512 too.
func TestUpdateWithout512(t *testing.T) {
	if !cpu.X86.HasAVX2 || !hasVPCLMULQDQ() || !cpu.X86.HasSSE42 {
		t.Skip("this CPU has no VPCLMULQDQ")
	}
	defer func(f512, f bool) { fold512, folding = f512, f }(fold512, folding)
	fold512, folding = false, true
	rng := rand.New(rand.NewPCG(7, 8))
	buf := make([]byte, 70_000)
	for i := range buf {
		buf[i] = byte(rng.Uint32())
	}
	for _, n := range []int{0, 511, 512, 2047, 2048, 2048 + 256, 2048 + 511, 4096 + 300, 65536, 65536 + 2047, 69_999} {
		crc := rng.Uint32()
		if got, want := Update(crc, buf[1:1+n]), crc32.Update(crc, stdTable, buf[1:1+n]); got != want {
			t.Fatalf("Update(%08x, %d bytes) without AVX-512: %08x, want %08x", crc, n, got, want)
		}
	}
}
