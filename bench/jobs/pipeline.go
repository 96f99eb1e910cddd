package jobs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/bits"

	"github.com/sluicehq/sluice/engine"
)

// MaxPipelineSize is the largest pipeline message: the largest engine
// message less the key (eight bytes and their one-byte length).
const MaxPipelineSize = engine.MaxMessageBytes - 9

// Pipeline is gen -> pass (round robin) -> sum (hash by key). Message i
// (timestamp i) carries its send time, i, and filler; its key is
// i mod Keys, and the sinks record, key by key, which i arrived and how
// often, so that [CheckPipeline] finds every message lost or repeated.
func Pipeline(spec Spec, lat Latency) (*engine.Job, error) {
	if spec.Size < 24 || spec.Size > MaxPipelineSize {
		return nil, fmt.Errorf("jobs: pipeline messages of %d bytes, not in [24, %d]", spec.Size, MaxPipelineSize)
	}
	switch {
	case spec.Keys == 0:
		spec.Keys = 64
	case spec.Keys < 0 || spec.Keys > MaxKeys:
		return nil, fmt.Errorf("jobs: pipeline keys %d, not in [1, %d] (0: 64)", spec.Keys, MaxKeys)
	}
	if spec.Limit < 0 {
		return nil, fmt.Errorf("jobs: pipeline limit %d is negative (0: no limit)", spec.Limit)
	}
	keys := spec.Keys
	return &engine.Job{
		Procs: []engine.Proc{
			{Name: "gen", Parallelism: 1, NewSource: func(int) (engine.Source, error) {
				return &GenSource{Size: spec.Size, Deadline: spec.DeadlineNs, Limit: spec.Limit}, nil
			}},
			{Name: "pass", Parallelism: spec.Middle, NewTask: func(int) (engine.Task, error) { return &Pass{Keys: keys}, nil }},
			{Name: "sum", Parallelism: spec.Last, NewTask: func(int) (engine.Task, error) {
				return &Sum{Keys: keys, seen: map[uint64]*Seen{}, lat: lat}, nil
			}},
		},
		Edges: []engine.Edge{
			{From: "gen", To: "pass", Partitioner: engine.RoundRobin},
			{From: "pass", To: "sum", Partitioner: engine.Hash},
		},
	}, nil
}

// GenSource generates message i with timestamp i until Deadline (a
// [Now] value) or Limit messages. Generation is deterministic but
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
	now := Now()
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

// Seen is what Sum keeps per key: which messages of the key arrived, as
// their ordinal j among the key's messages (message i is the (i / keys)th of
// key i mod keys), and how many arrived again. Every j below Next arrived;
// bit b of Bits says whether Next+b did. Messages of a key arrive nearly in
// order, so Bits stays a few words long and Next advances by whole words;
// a lost message keeps Next behind it and Bits grows by a bit per message
// of the key after it.
type Seen struct {
	Next uint64
	Bits []uint64
	Dups uint64
}

// add records ordinal j, counting it as a duplicate if it was seen.
func (s *Seen) add(j uint64) {
	if j < s.Next {
		s.Dups++
		return
	}
	off := j - s.Next
	w := off / 64
	for uint64(len(s.Bits)) <= w {
		s.Bits = append(s.Bits, 0)
	}
	bit := uint64(1) << (off % 64)
	if s.Bits[w]&bit != 0 {
		s.Dups++
		return
	}
	s.Bits[w] |= bit
	n := 0
	for n < len(s.Bits) && s.Bits[n] == ^uint64(0) {
		n++
	}
	if n > 0 {
		s.Next += 64 * uint64(n)
		s.Bits = append(s.Bits[:0], s.Bits[n:]...)
	}
}

// distinct counts the ordinals below limit that arrived, and those at or
// beyond it (which were never generated).
func (s *Seen) distinct(limit uint64) (in, beyond uint64) {
	in = min(s.Next, limit)
	beyond = s.Next - in
	for w, word := range s.Bits {
		for word != 0 {
			b := uint64(bits.TrailingZeros64(word))
			word &= word - 1
			if s.Next+uint64(w)*64+b < limit {
				in++
			} else {
				beyond++
			}
		}
	}
	return in, beyond
}

// Sum records, per key, which message numbers arrived (see [Seen]); its
// state is that record, so the check at the end is exact per message.
type Sum struct {
	Keys int
	seen map[uint64]*Seen
	lat  Latency
}

// Process adds the run and records latencies (one clock read per run),
// except in the engine's checkpoint copy, which sees every message again.
func (s *Sum) Process(in []engine.Message, out *engine.Emitter) error {
	rec := s.lat
	if out.CheckpointCopy() {
		rec = nil
	}
	var now int64
	if rec != nil {
		now = Now()
	}
	// Messages of one source read share their send time: equal latencies
	// in a row are recorded at once.
	var lat, same int64
	for _, m := range in {
		if len(m.Key) != 8 || len(m.Payload) < 16 {
			return errors.New("jobs: malformed pipeline message")
		}
		k := binary.LittleEndian.Uint64(m.Key)
		i := binary.LittleEndian.Uint64(m.Payload[8:])
		if i%uint64(s.Keys) != k {
			return fmt.Errorf("jobs: message %d arrived with key %d", i, k)
		}
		ks := s.seen[k]
		if ks == nil {
			ks = &Seen{}
			s.seen[k] = ks
		}
		ks.add(i / uint64(s.Keys))
		if rec != nil {
			if l := now - int64(binary.LittleEndian.Uint64(m.Payload)); l != lat || same == 0 {
				if same > 0 {
					rec(lat, same)
				}
				lat, same = l, 1
			} else {
				same++
			}
		}
	}
	if same > 0 {
		rec(lat, same)
	}
	return nil
}

// Snapshot encodes what arrived: uvarint number of keys, then per key
// uvarint key, Next, Dups, number of words of Bits, and the words, each 8
// bytes little endian.
func (s *Sum) Snapshot(dst []byte) ([]byte, error) {
	dst = binary.AppendUvarint(dst, uint64(len(s.seen)))
	for k, v := range s.seen {
		dst = binary.AppendUvarint(dst, k)
		dst = binary.AppendUvarint(dst, v.Next)
		dst = binary.AppendUvarint(dst, v.Dups)
		dst = binary.AppendUvarint(dst, uint64(len(v.Bits)))
		for _, w := range v.Bits {
			dst = binary.LittleEndian.AppendUint64(dst, w)
		}
	}
	return dst, nil
}

// Restore decodes a Snapshot.
func (s *Sum) Restore(b []byte) error {
	m, err := decodeSeen(b)
	if err != nil {
		return err
	}
	s.seen = m
	return nil
}

func decodeSeen(b []byte) (map[uint64]*Seen, error) {
	uv := func() (uint64, bool) {
		x, k := binary.Uvarint(b)
		if k <= 0 {
			return 0, false
		}
		b = b[k:]
		return x, true
	}
	n, ok := uv()
	if !ok || n > uint64(len(b)) {
		return nil, errCounts
	}
	m := make(map[uint64]*Seen, n)
	for range n {
		var v [4]uint64
		for i := range v {
			if v[i], ok = uv(); !ok {
				return nil, errCounts
			}
		}
		if v[3] > uint64(len(b))/8 {
			return nil, errCounts
		}
		if _, dup := m[v[0]]; dup {
			return nil, errCounts
		}
		ks := &Seen{Next: v[1], Dups: v[2], Bits: make([]uint64, v[3])}
		for i := range ks.Bits {
			ks.Bits[i] = binary.LittleEndian.Uint64(b)
			b = b[8:]
		}
		m[v[0]] = ks
	}
	if len(b) != 0 {
		return nil, errCounts
	}
	return m, nil
}

// Finish returns what arrived, as Snapshot encodes it.
func (s *Sum) Finish() ([]byte, error) { return s.Snapshot(nil) }

// PipelineCheck is the outcome of checking a pipeline's sinks against its
// source, message by message: Generated messages, Delivered arrivals
// (duplicates included), Lost messages that never arrived and Duplicated
// arrivals beyond the first of a message (or of a message never
// generated), each counted on its own; Diff describes the first
// difference, "" if none.
type PipelineCheck struct {
	Generated, Delivered, Lost, Duplicated int64
	Diff                                   string
}

// CheckPipeline checks the sinks' results against the source's count of
// generated messages, over keys.
func CheckPipeline(results map[string][]byte, keys int) (PipelineCheck, error) {
	var c PipelineCheck
	if keys < 1 {
		keys = 64
	}
	gb, ok := results["0.0"]
	if !ok || len(gb) != 8 {
		return c, errors.New("jobs: no result from the source")
	}
	n := binary.LittleEndian.Uint64(gb)
	c.Generated = int64(n)
	got := map[uint64]*Seen{}
	for id, b := range results {
		if len(id) < 2 || id[:2] != "2." {
			continue
		}
		m, err := decodeSeen(b)
		if err != nil {
			return c, fmt.Errorf("%s: %w", id, err)
		}
		for k, v := range m {
			if _, dup := got[k]; dup {
				return c, fmt.Errorf("jobs: key %d kept by two tasks", k)
			}
			got[k] = v
		}
	}
	for k := range got {
		if k >= uint64(keys) {
			return c, fmt.Errorf("jobs: key %d beyond the %d keys", k, keys)
		}
	}
	for k := range uint64(keys) {
		var want uint64 // messages k, k+K, ... below n
		if k < n {
			want = (n - k + uint64(keys) - 1) / uint64(keys)
		}
		var in, beyond, dups uint64
		if v := got[k]; v != nil {
			in, beyond = v.distinct(want)
			dups = v.Dups
		}
		lost, dup := want-in, dups+beyond
		c.Lost += int64(lost)
		c.Duplicated += int64(dup)
		c.Delivered += int64(in + beyond + dups)
		if (lost > 0 || dup > 0) && c.Diff == "" {
			c.Diff = fmt.Sprintf("key %d: %d of %d messages arrived, %d missing, %d arrived again or were never generated",
				k, in, want, lost, dup)
		}
	}
	return c, nil
}
