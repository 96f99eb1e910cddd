#include "textflag.h"

// Each step below folds every 16-byte lane of a 512-bit register d bytes
// forward (crc32c_amd64.go, foldPair): with the lane's constants (K1, K2)
// in Kd, the lane's low quadword times K1 XOR its high quadword times K2,
// XORed into what lies d bytes on.

// func foldAVX512(crc uint32, p []byte, k *foldKeys) uint32
TEXT ·foldAVX512(SB), NOSPLIT, $0-44
	MOVL crc+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	MOVQ k+32(FP), DX

	// The first block, with the CRC register XORed into its first four
	// bytes: a CRC of s before the input is the CRC of 0 before the input
	// with s added to its first 32 bits.
	VMOVDQU64 0(SI), Z0
	VMOVDQU64 64(SI), Z1
	VMOVDQU64 128(SI), Z2
	VMOVDQU64 192(SI), Z3
	VMOVD     AX, X4
	VPXORQ    Z4, Z0, Z0
	ADDQ      $256, SI
	SUBQ      $256, CX
	VMOVDQU64 0(DX), Z10

loop:
	CMPQ CX, $256
	JB   combine
	VPCLMULQDQ $0x00, Z10, Z0, Z4
	VPCLMULQDQ $0x11, Z10, Z0, Z0
	VPCLMULQDQ $0x00, Z10, Z1, Z5
	VPCLMULQDQ $0x11, Z10, Z1, Z1
	VPCLMULQDQ $0x00, Z10, Z2, Z6
	VPCLMULQDQ $0x11, Z10, Z2, Z2
	VPCLMULQDQ $0x00, Z10, Z3, Z7
	VPCLMULQDQ $0x11, Z10, Z3, Z3
	VPTERNLOGQ $0x96, 0(SI), Z4, Z0
	VPTERNLOGQ $0x96, 64(SI), Z5, Z1
	VPTERNLOGQ $0x96, 128(SI), Z6, Z2
	VPTERNLOGQ $0x96, 192(SI), Z7, Z3
	ADDQ       $256, SI
	SUBQ       $256, CX
	JMP        loop

combine:
	// Z0, Z1 and Z2 onto Z3: 192, 128 and 64 bytes on.
	VMOVDQU64  64(DX), Z11
	VPCLMULQDQ $0x00, Z11, Z0, Z4
	VPCLMULQDQ $0x11, Z11, Z0, Z5
	VPTERNLOGQ $0x96, Z5, Z4, Z3
	VMOVDQU64  128(DX), Z11
	VPCLMULQDQ $0x00, Z11, Z1, Z4
	VPCLMULQDQ $0x11, Z11, Z1, Z5
	VPTERNLOGQ $0x96, Z5, Z4, Z3
	VMOVDQU64  192(DX), Z11
	VPCLMULQDQ $0x00, Z11, Z2, Z4
	VPCLMULQDQ $0x11, Z11, Z2, Z5
	VPTERNLOGQ $0x96, Z5, Z4, Z3

	// Z3's lanes 0, 1 and 2 onto lane 3 (48, 32 and 16 bytes on; the
	// constants of lane 3 are zero), leaving 16 bytes in X6.
	VMOVDQU64     256(DX), Z11
	VPCLMULQDQ    $0x00, Z11, Z3, Z4
	VPCLMULQDQ    $0x11, Z11, Z3, Z5
	VPXORQ        Z5, Z4, Z4
	VEXTRACTI32X4 $3, Z3, X6
	VEXTRACTI32X4 $1, Z4, X7
	VEXTRACTI32X4 $2, Z4, X8
	VPTERNLOGQ    $0x96, X8, X7, X6
	VPXORQ        X4, X6, X6

	// The CRC of those 16 bytes from 0 is the CRC of the whole input.
	VMOVQ   X6, AX
	VPEXTRQ $1, X6, BX
	XORQ    R8, R8
	CRC32Q  AX, R8
	CRC32Q  BX, R8
	VZEROUPPER
	MOVL    R8, ret+40(FP)
	RET

// FINISH256 ends a fold in eight 256-bit registers (DX the constants):
// Y0-Y6 onto Y7, 224 to 32 bytes on, each with its pair of constants from
// the 32-byte rows of k.near; Y7's low lane onto its high lane, 16 bytes
// on; and the CRC from 0 of those 16 bytes, which is the result.
#define FOLD2(reg, off) \
	VMOVDQU    off(DX), Y15; \
	VPCLMULQDQ $0x00, Y15, reg, Y8; \
	VPCLMULQDQ $0x11, Y15, reg, Y9; \
	VPXOR      Y8, Y7, Y7; \
	VPXOR      Y9, Y7, Y7

#define FINISH256 \
	FOLD2(Y0, 320); FOLD2(Y1, 352); FOLD2(Y2, 384); FOLD2(Y3, 416); \
	FOLD2(Y4, 448); FOLD2(Y5, 480); FOLD2(Y6, 512); \
	VEXTRACTI128 $1, Y7, X6; VMOVDQU 544(DX), X15; \
	VPCLMULQDQ $0x00, X15, X7, X8; VPCLMULQDQ $0x11, X15, X7, X9; \
	VPXOR X8, X6, X6; VPXOR X9, X6, X6; \
	VMOVQ X6, AX; VPEXTRQ $1, X6, BX; XORQ R8, R8; CRC32Q AX, R8; CRC32Q BX, R8; \
	VZEROUPPER; MOVL R8, ret+40(FP); RET

// FSTEP folds one register 256 bytes on (Y15 the constants) into the
// data at off(SI); FOLDBLOCK does so for all eight and moves SI on.
#define FSTEP(reg, tmp, off) \
	VPCLMULQDQ $0x00, Y15, reg, tmp; VPCLMULQDQ $0x11, Y15, reg, reg; \
	VPXOR tmp, reg, reg; VPXOR off(SI), reg, reg

#define FOLDBLOCK \
	FSTEP(Y0, Y8, 0); FSTEP(Y1, Y9, 32); FSTEP(Y2, Y10, 64); FSTEP(Y3, Y11, 96); \
	FSTEP(Y4, Y8, 128); FSTEP(Y5, Y9, 160); FSTEP(Y6, Y10, 192); FSTEP(Y7, Y11, 224); \
	ADDQ $256, SI

// func foldAVX2(crc uint32, p []byte, k *foldKeys) uint32
//
// foldAVX512 with eight 256-bit registers (VEX encoding: CPUs with
// VPCLMULQDQ but without AVX-512, or with it hidden by a hypervisor).
TEXT ·foldAVX2(SB), NOSPLIT, $0-44
	MOVL crc+0(FP), AX
	MOVQ p_base+8(FP), SI
	MOVQ p_len+16(FP), CX
	MOVQ k+32(FP), DX

	VMOVDQU 0(SI), Y0
	VMOVDQU 32(SI), Y1
	VMOVDQU 64(SI), Y2
	VMOVDQU 96(SI), Y3
	VMOVDQU 128(SI), Y4
	VMOVDQU 160(SI), Y5
	VMOVDQU 192(SI), Y6
	VMOVDQU 224(SI), Y7
	VMOVD   AX, X8
	VPXOR   Y8, Y0, Y0
	ADDQ    $256, SI
	SUBQ    $256, CX
	VMOVDQU 0(DX), Y15

loop2:
	CMPQ CX, $256
	JB   combine2
	FOLDBLOCK
	SUBQ $256, CX
	JMP  loop2

combine2:
	FINISH256

// func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func foldHybrid(crc uint32, p []byte, k *foldKeys) uint32
//
// foldAVX2 with the CRC32 instruction working beside the carry-less
// multiplier, which run on different units: p is taken in 2 KiB
// superblocks, each a CRC part C (its first KiB, four CRC32 streams of
// 256 bytes) and a fold part F (its second KiB, four turns of the
// eight-register fold). While the fold takes superblock k's F, the streams
// take superblock k+1's C; their four registers, shifted to C's end
// (shift: s·x^(8d) mod P = CRC32 from 0 of the carry-less product of s
// and x^(8d-33) mod P, reflected) and XORed, are the CRC of C from 0,
// which XORed into F's first four bytes carries it on (as the CRC before
// any input is carried). The fold steps over each C to the next F (1280
// bytes). len(p) is a positive multiple of 2048.
TEXT ·foldHybrid(SB), NOSPLIT, $0-44
	MOVL crc+0(FP), AX
	MOVQ p_base+8(FP), DI
	MOVQ p_len+16(FP), CX
	MOVQ k+32(FP), R10
	SHRQ $11, CX
	LEAQ 1024(DI), SI

#define CRC8(base) \
	CRC32Q base+0(DI), AX; CRC32Q base+256(DI), BX; CRC32Q base+512(DI), R11; CRC32Q base+768(DI), R12

#define CRCCHUNK \
	CRC8(0); CRC8(8); CRC8(16); CRC8(24); CRC8(32); CRC8(40); CRC8(48); CRC8(56); \
	ADDQ $64, DI

// SHIFT(src, koff, dst): dst = src·x^(8d) mod P for the d of the
// constant at koff(R10).
#define SHIFT(src, koff, dst) \
	VMOVQ src, X12; VMOVQ koff(R10), X13; VPCLMULQDQ $0x00, X13, X12, X12; \
	VMOVQ X12, R13; XORQ dst, dst; CRC32Q R13, dst

// COMBINE: R14 = the CRC from 0 of the C part the streams took.
#define COMBINE \
	SHIFT(AX, 592, R14); SHIFT(BX, 600, R15); SHIFT(R11, 608, R9); \
	XORQ R15, R14; XORQ R9, R14; XORQ R12, R14

// FOLDCRC is FOLDBLOCK and CRCCHUNK interleaved, so that the two units
// work side by side rather than in turns.
#define FOLDCRC \
	FSTEP(Y0, Y8, 0); CRC8(0); FSTEP(Y1, Y9, 32); CRC8(8); \
	FSTEP(Y2, Y10, 64); CRC8(16); FSTEP(Y3, Y11, 96); CRC8(24); \
	FSTEP(Y4, Y8, 128); CRC8(32); FSTEP(Y5, Y9, 160); CRC8(40); \
	FSTEP(Y6, Y10, 192); CRC8(48); FSTEP(Y7, Y11, 224); CRC8(56); \
	ADDQ $256, SI; ADDQ $64, DI

// Into the first block of an F: the registers (zero before the first)
// fold over the C before it, and the CRC of that C (R14) joins its first
// four bytes (the loop below does the same with the next C's CRC work
// interleaved).
#define FIRSTBLOCK \
	VMOVDQU 560(R10), Y15; FOLDBLOCK; VMOVDQU 0(R10), Y15; \
	VMOVD R14, X12; VPXOR Y12, Y0, Y0

	// The first C alone, its first stream from the CRC given.
	XORQ BX, BX
	XORQ R11, R11
	XORQ R12, R12
	CRCCHUNK
	CRCCHUNK
	CRCCHUNK
	CRCCHUNK
	COMBINE
	ADDQ $1792, DI
	VPXOR Y0, Y0, Y0
	VPXOR Y1, Y1, Y1
	VPXOR Y2, Y2, Y2
	VPXOR Y3, Y3, Y3
	VPXOR Y4, Y4, Y4
	VPXOR Y5, Y5, Y5
	VPXOR Y6, Y6, Y6
	VPXOR Y7, Y7, Y7

hybridloop:
	CMPQ CX, $1
	JBE  hybridlast
	// F of this superblock, C of the next.
	XORQ AX, AX
	XORQ BX, BX
	XORQ R11, R11
	XORQ R12, R12
	VMOVDQU 560(R10), Y15
	FOLDCRC
	VMOVDQU 0(R10), Y15
	VMOVD   R14, X12
	VPXOR   Y12, Y0, Y0
	FOLDCRC
	FOLDCRC
	FOLDCRC
	COMBINE
	ADDQ $1024, SI
	ADDQ $1792, DI
	DECQ CX
	JMP  hybridloop

hybridlast:
	FIRSTBLOCK
	FOLDBLOCK
	FOLDBLOCK
	FOLDBLOCK

	// The registers onto the last 16 bytes, as foldAVX2 ends.
	MOVQ R10, DX
	FINISH256
