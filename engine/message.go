package engine

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/engine/store"
	"github.com/sluicehq/sluice/wire"
)

// Message is what tasks exchange: an event timestamp, an optional key that
// the hash partitioner routes by, and a payload.
//
// Messages handed to [Task.Process] alias the transport's receive buffer:
// Key and Payload are valid only during the call.
type Message struct {
	Ts      int64
	Key     []byte
	Payload []byte
}

// Record is what a [Source] reads and what the source-end message store
// keeps: a timestamp and a payload. A source's records become keyless
// messages.
type Record = store.Record

// ErrMalformed means a message that arrived over the transport does not
// decode; it can only come from a peer that is not this engine.
var ErrMalformed = errors.New("engine: malformed message")

// appendEncoded appends the transport payload of a message: uvarint key
// length, key, payload.
func appendEncoded(dst, key, payload []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(key)))
	dst = append(dst, key...)
	return append(dst, payload...)
}

func decodeMessage(ts int64, b []byte) (Message, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return Message{}, fmt.Errorf("%w: %d bytes", ErrMalformed, len(b))
	}
	end := k + int(n)
	return Message{Ts: ts, Key: b[k:end:end], Payload: b[end:]}, nil
}

// Partitioner says which tasks of the next processor receive a message.
type Partitioner int

const (
	// Hash sends a message to one task chosen by a hash (FNV-1a) of its
	// key, the same in every process, so equal keys meet in one task.
	Hash Partitioner = iota
	// RoundRobin sends each message to the next task in turn.
	RoundRobin
	// Broadcast sends every message to every task.
	Broadcast
)

func (p Partitioner) String() string {
	switch p {
	case Hash:
		return "hash"
	case RoundRobin:
		return "round-robin"
	case Broadcast:
		return "broadcast"
	}
	return fmt.Sprintf("Partitioner(%d)", int(p))
}

func hashKey(key []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range key {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

// Emitter collects what a task emits during one call of [Task.Process]
// (or what a source read), already partitioned and encoded per target
// task; the engine sends it when the call returns. An Emitter belongs to
// one task and is not safe for concurrent use.
type Emitter struct {
	edges []emitEdge
	// While a task processes a run, lo and hi bound the timestamps its
	// outputs may have; stray is the first one emitted outside them.
	bounded, strayed bool
	lo, hi, stray    int64
}

// bound makes Emit check that every timestamp lies in [lo, hi], the
// timestamps of the run being processed, until unbound.
func (e *Emitter) bound(lo, hi int64) {
	e.bounded, e.strayed, e.lo, e.hi = true, false, lo, hi
}

// unbound ends bound and reports the first timestamp emitted outside it.
func (e *Emitter) unbound() (stray int64, strayed bool) {
	e.bounded = false
	return e.stray, e.strayed
}

type emitEdge struct {
	part    Partitioner
	rr      int
	targets []outBuf
}

// outBuf is the encoded messages bound for one target task.
type outBuf struct {
	buf   []byte
	ends  []int
	ts    []int64
	minTs int64
}

func (o *outBuf) add(ts int64, key, payload []byte) {
	if len(o.ts) == 0 || ts < o.minTs {
		o.minTs = ts
	}
	o.buf = appendEncoded(o.buf, key, payload)
	o.ends = append(o.ends, len(o.buf))
	o.ts = append(o.ts, ts)
}

func (o *outBuf) reset() {
	if cap(o.buf) > 4<<20 {
		o.buf, o.ends, o.ts = nil, nil, nil
	}
	o.buf, o.ends, o.ts = o.buf[:0], o.ends[:0], o.ts[:0]
}

// Emit sends a message with timestamp ts, key and payload to every
// outgoing edge, partitioned by the edge's [Partitioner]. Key and payload
// are copied. A task must give each output exactly the timestamp of the
// input that caused it: the global clock and recovery rely on it. An
// earlier one could fall below what the clock has let go of; a later one
// can cross a checkpoint time Tc that its input is below, and then, after a
// recovery to Tc, neither the input (inside the checkpoint) is replayed nor
// the output (not in its target's checkpoint) is sent again: it is lost.
// An output whose timestamp is outside the timestamps of the run being
// processed fails the task when Process returns.
func (e *Emitter) Emit(ts int64, key, payload []byte) {
	if e.bounded && (ts < e.lo || ts > e.hi) && !e.strayed {
		e.strayed, e.stray = true, ts
	}
	for i := range e.edges {
		ed := &e.edges[i]
		n := len(ed.targets)
		switch ed.part {
		case Hash:
			ed.targets[hashKey(key)%uint64(n)].add(ts, key, payload)
		case RoundRobin:
			ed.targets[ed.rr].add(ts, key, payload)
			if ed.rr++; ed.rr == n {
				ed.rr = 0
			}
		case Broadcast:
			for t := range ed.targets {
				ed.targets[t].add(ts, key, payload)
			}
		}
	}
}

// discard is an Emitter with no edges: the checkpoint copy of a stateful
// processor emits into it.
var discard = &Emitter{}

// CheckpointCopy reports whether this call of [Task.Process] feeds the
// checkpoint copy of a [Stateful] task, which sees every message a second
// time: side effects that must happen once per message (metrics, latency
// records) belong to the other calls. What it emits is dropped.
func (e *Emitter) CheckpointCopy() bool { return e == discard }

// MaxMessageBytes is the largest encoded message (key and payload) a task
// may emit when its edge crosses the transport: one DATA frame's body, less
// room for the run header. Larger messages fail the task with
// transport.ErrTooLarge.
const MaxMessageBytes = wire.DefaultMaxFrame - 64<<10
