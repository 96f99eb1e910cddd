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
	VEXTRACTI64X2 $3, Z3, X6
	VEXTRACTI64X2 $1, Z4, X7
	VEXTRACTI64X2 $2, Z4, X8
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
	VPCLMULQDQ $0x00, Y15, Y0, Y8
	VPCLMULQDQ $0x11, Y15, Y0, Y0
	VPCLMULQDQ $0x00, Y15, Y1, Y9
	VPCLMULQDQ $0x11, Y15, Y1, Y1
	VPCLMULQDQ $0x00, Y15, Y2, Y10
	VPCLMULQDQ $0x11, Y15, Y2, Y2
	VPCLMULQDQ $0x00, Y15, Y3, Y11
	VPCLMULQDQ $0x11, Y15, Y3, Y3
	VPXOR      Y8, Y0, Y0
	VPXOR      Y9, Y1, Y1
	VPXOR      Y10, Y2, Y2
	VPXOR      Y11, Y3, Y3
	VPXOR      0(SI), Y0, Y0
	VPXOR      32(SI), Y1, Y1
	VPXOR      64(SI), Y2, Y2
	VPXOR      96(SI), Y3, Y3
	VPCLMULQDQ $0x00, Y15, Y4, Y8
	VPCLMULQDQ $0x11, Y15, Y4, Y4
	VPCLMULQDQ $0x00, Y15, Y5, Y9
	VPCLMULQDQ $0x11, Y15, Y5, Y5
	VPCLMULQDQ $0x00, Y15, Y6, Y10
	VPCLMULQDQ $0x11, Y15, Y6, Y6
	VPCLMULQDQ $0x00, Y15, Y7, Y11
	VPCLMULQDQ $0x11, Y15, Y7, Y7
	VPXOR      Y8, Y4, Y4
	VPXOR      Y9, Y5, Y5
	VPXOR      Y10, Y6, Y6
	VPXOR      Y11, Y7, Y7
	VPXOR      128(SI), Y4, Y4
	VPXOR      160(SI), Y5, Y5
	VPXOR      192(SI), Y6, Y6
	VPXOR      224(SI), Y7, Y7
	ADDQ       $256, SI
	SUBQ       $256, CX
	JMP        loop2

combine2:
	// Y0-Y6 onto Y7, 224 to 32 bytes on, each with its pair of constants
	// from the 32-byte rows of k.near.
#define FOLD2(reg, off) \
	VMOVDQU    off(DX), Y15; \
	VPCLMULQDQ $0x00, Y15, reg, Y8; \
	VPCLMULQDQ $0x11, Y15, reg, Y9; \
	VPXOR      Y8, Y7, Y7; \
	VPXOR      Y9, Y7, Y7

	FOLD2(Y0, 320)
	FOLD2(Y1, 352)
	FOLD2(Y2, 384)
	FOLD2(Y3, 416)
	FOLD2(Y4, 448)
	FOLD2(Y5, 480)
	FOLD2(Y6, 512)

	// Y7's low lane onto its high lane, 16 bytes on.
	VEXTRACTI128 $1, Y7, X6
	VMOVDQU      544(DX), X15
	VPCLMULQDQ   $0x00, X15, X7, X8
	VPCLMULQDQ   $0x11, X15, X7, X9
	VPXOR        X8, X6, X6
	VPXOR        X9, X6, X6

	VMOVQ   X6, AX
	VPEXTRQ $1, X6, BX
	XORQ    R8, R8
	CRC32Q  AX, R8
	CRC32Q  BX, R8
	VZEROUPPER
	MOVL    R8, ret+40(FP)
	RET

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
