// Package wire is the byte format of Sluice: the connection preface, the
// frames that follow it, and the DATA batches that carry messages.
//
// Data flows through it like this. A sender appends a [Preface] with
// [AppendPreface], then frames: control frames with the whole-frame encoders
// ([AppendOpen], [AppendAck], ...), and DATA frames built in place with
// [BeginFrame], [AppendRunHeader], [AppendMessage] and [FinishFrame], so a
// batch is written straight into the outbound buffer without a copy. A
// receiver peeks at its inbound bytes and calls [DecodePreface] once, then
// [DecodeFrame] repeatedly; both return [ErrNeedMore] while the bytes present
// are an incomplete prefix, and consume nothing until they succeed. The body
// of a decoded frame is parsed with the Parse functions or, for DATA, walked
// with a [DataReader] without copying or allocating.
//
// Everything here is pure: no I/O, no goroutines, no global mutable state. All
// functions are safe for concurrent use on distinct buffers; a [DataReader]
// belongs to one goroutine.
//
// Decoders never panic, never read past the length a frame declares and never
// allocate based on a length or count read from the input. Every protocol
// fault is reported as an error that matches one of the package's sentinels
// with [errors.Is]; faults inside a frame are a [*FrameError] that names the
// frame type and the body offset. The byte-level reference is SPEC.md in this
// directory.
package wire
