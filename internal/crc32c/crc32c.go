// Package crc32c computes CRC-32C (Castagnoli), the checksum of every wire
// frame, store batch, checkpoint file and journal record (through
// internal/crcframe). [Update] gives what hash/crc32.Update gives with the
// Castagnoli table, faster on long inputs where the CPU can fold 16-byte
// lanes with carry-less multiplication (VPCLMULQDQ on amd64): it folds the
// input 256 bytes a turn down to 16 bytes, which the CRC32 instruction
// finishes, and leaves the tail under 256 bytes to hash/crc32. Where the
// CPU has AVX-512 it folds in 512-bit registers. Where it has VPCLMULQDQ
// without AVX-512 (or a hypervisor hides AVX-512, as on some of the VMs
// this project measures on) it folds in 256-bit registers and, on inputs of
// 2 KiB and more, gives half of each 2 KiB to four CRC32
// instruction streams meanwhile, which run on other units. Elsewhere, and
// for inputs under 512 bytes, it is hash/crc32, whose three interleaved
// CRC32 instructions run at about 8 bytes a cycle.
//
// Measured on a 2-core AMD EPYC VM (Zen 4), 64 KiB (BenchmarkUpdate,
// BenchmarkFold): hash/crc32 26 GB/s, the 512-bit fold 55-58 GB/s, the
// 256-bit fold alone 24-29 GB/s (this CPU multiplies a 512-bit register in
// the time of a 256-bit one), with the CRC32 streams beside it 37-41 GB/s
// (beside the 512-bit fold they made it slower, 53 GB/s).
// A sender CRCs each 64 KiB batch it writes and a receiver each one it
// reads; with hash/crc32 that was a tenth of a one-process transport
// benchmark's CPU (issue 14, results/cpu-budget).
package crc32c

import (
	"hash"
	"hash/crc32"
)

// table is hash/crc32's Castagnoli table; it uses the CRC32 instruction
// where the CPU has one.
var table = crc32.MakeTable(crc32.Castagnoli)

// Size is the size of a CRC-32C in bytes.
const Size = 4

// Update returns the CRC-32C of the bytes whose CRC-32C is crc followed by
// p, as hash/crc32.Update(crc, crc32.MakeTable(crc32.Castagnoli), p).
func Update(crc uint32, p []byte) uint32 { return update(crc, p) }

// Method says how Update computes on this CPU: "512-bit fold", "256-bit
// fold with CRC32 streams", or "hash/crc32" (no VPCLMULQDQ, or not amd64).
// The transport's CPU a message depends on it, so benchmarks report it.
func Method() string {
	switch {
	case fold512:
		return "512-bit fold"
	case folding:
		return "256-bit fold with CRC32 streams"
	}
	return "hash/crc32"
}

// New returns a hash.Hash32 computing the CRC-32C with [Update].
func New() hash.Hash32 { return new(digest) }

type digest struct{ crc uint32 }

func (d *digest) Write(p []byte) (int, error) {
	d.crc = update(d.crc, p)
	return len(p), nil
}

func (d *digest) Sum32() uint32  { return d.crc }
func (d *digest) Reset()         { d.crc = 0 }
func (d *digest) Size() int      { return Size }
func (d *digest) BlockSize() int { return 1 }
func (d *digest) Sum(b []byte) []byte {
	return append(b, byte(d.crc>>24), byte(d.crc>>16), byte(d.crc>>8), byte(d.crc))
}
