package jobs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/engine"
)

// Pipeline is gen -> pass (round robin) -> sum (hash by key). Message i
// (timestamp i) carries its send time, i, and filler; its key is
// i mod Keys, and the sums check, key by key, that every i the source
// generated was summed exactly once.
func Pipeline(spec Spec, rec *bench.Recorder) (*engine.Job, error) {
	if spec.Size < 24 {
		return nil, fmt.Errorf("jobs: pipeline messages need at least 24 bytes, got %d", spec.Size)
	}
	if spec.Keys < 1 {
		spec.Keys = 64
	}
	keys := spec.Keys
	return &engine.Job{
		Procs: []engine.Proc{
			{Name: "gen", Parallelism: 1, NewSource: func(int) (engine.Source, error) {
				return &GenSource{Size: spec.Size, Deadline: spec.DeadlineNs, Limit: spec.Limit}, nil
			}},
			{Name: "pass", Parallelism: spec.Middle, NewTask: func(int) (engine.Task, error) { return &Pass{Keys: keys}, nil }},
			{Name: "sum", Parallelism: spec.Last, NewTask: func(int) (engine.Task, error) {
				return &Sum{sums: map[uint64]KeySum{}, rec: rec}, nil
			}},
		},
		Edges: []engine.Edge{
			{From: "gen", To: "pass", Partitioner: engine.RoundRobin},
			{From: "pass", To: "sum", Partitioner: engine.Hash},
		},
	}, nil
}

// GenSource generates message i with timestamp i until Deadline (a
// bench.Now() value) or Limit messages. Generation is deterministic but
// for the send time, so a restarted source continues where its log ends.
type GenSource struct {
	Size     int
	Deadline int64
	Limit    int64
	next     int64
	buf      []byte
}

// Start continues at message next.
func (g *GenSource) Start(next int64) error { g.next = next; return nil }

// Read generates up to 256 messages below limit.
func (g *GenSource) Read(dst []engine.Record, limit int64) ([]engine.Record, int64, error) {
	now := bench.Now()
	if (g.Deadline > 0 && now >= g.Deadline) || (g.Limit > 0 && g.next >= g.Limit) {
		return dst, g.next, io.EOF
	}
	n := int(min(256, max(0, limit-g.next)))
	if g.Limit > 0 {
		n = int(min(int64(n), g.Limit-g.next))
	}
	if cap(g.buf) < n*g.Size {
		g.buf = make([]byte, 256*g.Size)
		for i := range g.buf {
			g.buf[i] = byte('a' + i%26)
		}
	}
	for i := range n {
		p := g.buf[i*g.Size : (i+1)*g.Size : (i+1)*g.Size]
		binary.LittleEndian.PutUint64(p, uint64(now))
		binary.LittleEndian.PutUint64(p[8:], uint64(g.next))
		dst = append(dst, engine.Record{Ts: g.next, Payload: p})
		g.next++
	}
	return dst, g.next, nil
}

// Finish returns how many messages the source generated, 8 bytes little
// endian.
func (g *GenSource) Finish() ([]byte, error) {
	return binary.LittleEndian.AppendUint64(nil, uint64(g.next)), nil
}

// Pass keys each message by its number mod Keys and passes it on.
type Pass struct {
	Keys int
	key  [8]byte
}

// Process passes the run on.
func (p *Pass) Process(in []engine.Message, out *engine.Emitter) error {
	for _, m := range in {
		if len(m.Payload) < 16 {
			return errors.New("jobs: short pipeline message")
		}
		seq := binary.LittleEndian.Uint64(m.Payload[8:])
		binary.LittleEndian.PutUint64(p.key[:], seq%uint64(p.Keys))
		out.Emit(m.Ts, p.key[:], m.Payload)
	}
	return nil
}

// KeySum is what Sum keeps per key.
type KeySum struct {
	Count, Sum uint64
}

// Sum adds up message numbers per key; its state is the sums.
type Sum struct {
	sums map[uint64]KeySum
	rec  *bench.Recorder
}

// Process adds the run and records latencies (one clock read per run),
// except in the engine's checkpoint copy, which sees every message again.
func (s *Sum) Process(in []engine.Message, out *engine.Emitter) error {
	rec := s.rec
	if out.CheckpointCopy() {
		rec = nil
	}
	var now int64
	if rec != nil {
		now = bench.Now()
	}
	// Messages of one source read share their send time: equal latencies
	// in a row are recorded at once.
	var lat, same int64
	for _, m := range in {
		if len(m.Key) != 8 || len(m.Payload) < 16 {
			return errors.New("jobs: malformed pipeline message")
		}
		k := binary.LittleEndian.Uint64(m.Key)
		ks := s.sums[k]
		ks.Count++
		ks.Sum += binary.LittleEndian.Uint64(m.Payload[8:])
		s.sums[k] = ks
		if rec != nil {
			if l := now - int64(binary.LittleEndian.Uint64(m.Payload)); l != lat || same == 0 {
				if same > 0 {
					rec.RecordN(lat, same)
				}
				lat, same = l, 1
			} else {
				same++
			}
		}
	}
	if same > 0 {
		rec.RecordN(lat, same)
	}
	return nil
}

// Snapshot encodes the sums.
func (s *Sum) Snapshot(dst []byte) ([]byte, error) {
	dst = binary.AppendUvarint(dst, uint64(len(s.sums)))
	for k, v := range s.sums {
		dst = binary.AppendUvarint(dst, k)
		dst = binary.AppendUvarint(dst, v.Count)
		dst = binary.AppendUvarint(dst, v.Sum)
	}
	return dst, nil
}

// Restore decodes sums.
func (s *Sum) Restore(b []byte) error {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return errCounts
	}
	b = b[k:]
	m := make(map[uint64]KeySum, n)
	for range n {
		var v [3]uint64
		for i := range v {
			x, k := binary.Uvarint(b)
			if k <= 0 {
				return errCounts
			}
			v[i], b = x, b[k:]
		}
		m[v[0]] = KeySum{Count: v[1], Sum: v[2]}
	}
	s.sums = m
	return nil
}

// Finish returns the final sums.
func (s *Sum) Finish() ([]byte, error) { return s.Snapshot(nil) }

// CheckPipeline compares the sums in results with what a source that
// generated n messages over keys must give. It returns the number of
// messages summed and a description of the first difference, "" if none.
func CheckPipeline(results map[string][]byte, keys int) (generated, summed int64, diff string, err error) {
	if keys < 1 {
		keys = 64
	}
	gb, ok := results["0.0"]
	if !ok || len(gb) != 8 {
		return 0, 0, "", errors.New("jobs: no result from the source")
	}
	n := binary.LittleEndian.Uint64(gb)
	got := map[uint64]KeySum{}
	for id, b := range results {
		if len(id) < 2 || id[:2] != "2." {
			continue
		}
		var s Sum
		if err := s.Restore(b); err != nil {
			return 0, 0, "", err
		}
		for k, v := range s.sums {
			if _, dup := got[k]; dup {
				return int64(n), 0, fmt.Sprintf("key %d summed by two tasks", k), nil
			}
			got[k] = v
			summed += int64(v.Count)
		}
	}
	for k := range uint64(keys) {
		var want KeySum
		if k < n {
			// i = k, k+K, ..., k+(c-1)K
			c := (n - k + uint64(keys) - 1) / uint64(keys)
			want = KeySum{Count: c, Sum: c*k + uint64(keys)*c*(c-1)/2}
		}
		if got[k] != want {
			return int64(n), summed, fmt.Sprintf("key %d: got count %d sum %d, want count %d sum %d",
				k, got[k].Count, got[k].Sum, want.Count, want.Sum), nil
		}
	}
	return int64(n), summed, "", nil
}

var _ = time.Second
