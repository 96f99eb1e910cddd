package crc32c

import (
	"hash/crc32"
	"math/bits"

	"golang.org/x/sys/cpu"
)

// How this CPU folds, decided once: with 512-bit registers where it has
// AVX-512 with VPCLMULQDQ (and the OS saves those registers: x/sys/cpu
// checks), else with 256-bit ones where it has AVX2 and VPCLMULQDQ (some
// hypervisors hide AVX-512 from a CPU that has it), else not at all. The
// CRC32 instruction (SSE 4.2) finishes the fold.
var (
	fold512 = cpu.X86.HasAVX512F && cpu.X86.HasAVX512VL && cpu.X86.HasAVX512VPCLMULQDQ && cpu.X86.HasSSE42
	fold256 = !fold512 && cpu.X86.HasAVX2 && hasVPCLMULQDQ() && cpu.X86.HasSSE42
	folding = fold512 || fold256
)

// hasVPCLMULQDQ reports CPUID leaf 7's VPCLMULQDQ bit (ECX bit 10), which
// x/sys/cpu reports only together with AVX-512.
func hasVPCLMULQDQ() bool {
	if max, _, _, _ := cpuid(0, 0); max < 7 {
		return false
	}
	_, _, ecx, _ := cpuid(7, 0)
	return ecx&(1<<10) != 0
}

const (
	// foldBlock is what one turn of a fold loop takes: sixteen 16-byte
	// lanes, in four 512-bit registers or eight 256-bit ones.
	foldBlock = 256
	// foldMin is the shortest input worth folding; below it the set-up
	// and the final reduction cost more than hash/crc32 takes
	// (BenchmarkUpdate).
	foldMin = 512
	// hybridBlock is what foldHybrid takes a turn of its outer loop: a KiB
	// for the CRC32 instruction, a KiB for the fold.
	hybridBlock = 2048
)

func update(crc uint32, p []byte) uint32 {
	if folding && len(p) >= foldMin {
		n := len(p) &^ (foldBlock - 1)
		switch {
		case fold512:
			crc = ^foldAVX512(^crc, p[:n], &keys)
		case n >= hybridBlock:
			h := n &^ (hybridBlock - 1)
			crc = ^foldHybrid(^crc, p[:h], &keys)
			if h < n {
				crc = ^foldAVX2(^crc, p[h:n], &keys)
			}
		default:
			crc = ^foldAVX2(^crc, p[:n], &keys)
		}
		p = p[n:]
	}
	return crc32.Update(crc, table, p)
}

// foldAVX512 and foldAVX2 return the CRC register (not inverted) after p,
// starting from crc; len(p) is a positive multiple of foldBlock. In
// crc32c_amd64.s.
//
//go:noescape
func foldAVX512(crc uint32, p []byte, k *foldKeys) uint32

//go:noescape
func foldAVX2(crc uint32, p []byte, k *foldKeys) uint32

// foldHybrid is foldAVX2 with the CRC32 instruction taking half of p
// meanwhile; len(p) is a positive multiple of hybridBlock.
//
//go:noescape
func foldHybrid(crc uint32, p []byte, k *foldKeys) uint32

func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)

// foldKeys are the constants of the folds, each 128-bit lane the pair
// (K1, K2) of one distance (foldPair), at offsets the assembly knows:
// k256 steps each lane over a block; k192, k128 and k64 fold the first
// three 512-bit registers onto the fourth, and last that one's lanes at
// 48, 32 and 16 bytes from the end onto its last lane (whose own pair is
// zero); near folds the first seven 256-bit registers onto the eighth
// (224 to 32 bytes on), and k16 that one's low lane onto its high lane;
// k1280 steps foldHybrid's lanes over a CRC part to the next fold part, and
// shift moves its CRC32 streams' registers on over 768, 512 and 256 bytes
// (shiftKey).
type foldKeys struct {
	k256, k192, k128, k64, last [8]uint64    // offsets 0, 64, 128, 192, 256
	near                        [7][4]uint64 // 320
	k16                         [2]uint64    // 544
	k1280                       [4]uint64    // 560
	shift                       [3]uint64    // 592
}

var keys = makeKeys()

func makeKeys() foldKeys {
	var k foldKeys
	for i := 0; i < 8; i += 2 {
		k.k256[i], k.k256[i+1] = foldPair(256)
		k.k192[i], k.k192[i+1] = foldPair(192)
		k.k128[i], k.k128[i+1] = foldPair(128)
		k.k64[i], k.k64[i+1] = foldPair(64)
	}
	k.last[0], k.last[1] = foldPair(48)
	k.last[2], k.last[3] = foldPair(32)
	k.last[4], k.last[5] = foldPair(16)
	for i := range k.near {
		k1, k2 := foldPair(224 - 32*i)
		k.near[i] = [4]uint64{k1, k2, k1, k2}
	}
	k.k16[0], k.k16[1] = foldPair(16)
	k.k1280[0], k.k1280[1] = foldPair(1280)
	k.k1280[2], k.k1280[3] = k.k1280[0], k.k1280[1]
	for i, d := range []int{768, 512, 256} {
		k.shift[i] = shiftKey(d)
	}
	return k
}

// foldPair returns the constants that fold a 16-byte lane d bytes
// forward. The CRC is bit-reflected: a lane loaded little endian is the
// polynomial A = Ah·x^64 + Al with Ah in its low quadword (bit j the
// coefficient of x^(63-j)) and Al in its high one. Moved d bytes on, A
// becomes A·x^(8d) = Ah·x^(8d+64) + Al·x^(8d), the same modulo the
// polynomial P as Ah·K1 + Al·K2 with K1 = x^(8d+63) mod P and
// K2 = x^(8d-1) mod P: the carry-less product of two reflected 64-bit
// values is their product times x as a reflected 128-bit value, which
// the exponents one lower make up for. That sum (degree < 96) is XORed
// into the lane d bytes on.
func foldPair(d int) (k1, k2 uint64) {
	return bits.Reverse64(xPowMod(8*d + 63)), bits.Reverse64(xPowMod(8*d - 1))
}

// shiftKey returns the constant that moves a CRC register s on over d
// bytes of zeros for foldHybrid: s·x^(8d) mod P is the CRC32 instruction's
// CRC from 0 of the 8 bytes of the carry-less product of s and this
// constant. Both are reflected 32-bit values, so their product is the
// reflected product times x in a 64-bit word, which the CRC32 instruction
// multiplies by x^32 before it reduces: the constant is x^(8d-33) mod P.
func shiftKey(d int) uint64 { return uint64(bits.Reverse32(uint32(xPowMod(8*d - 33)))) }

// xPowMod returns x^n mod P, the Castagnoli polynomial, as a polynomial
// over GF(2) with bit i the coefficient of x^i.
func xPowMod(n int) uint64 {
	const p = 1<<32 | 0x1EDC6F41 // crc32.Castagnoli (0x82F63B78) unreflected
	r := uint64(1)
	for range n {
		r <<= 1
		if r&(1<<32) != 0 {
			r ^= p
		}
	}
	return r
}
