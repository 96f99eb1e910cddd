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
