package engine_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/transport"
)

// seqSource emits records 0..n-1 at timestamps 0..n-1, each payload the
// record's number.
type seqSource struct{ n, next int64 }

func (s *seqSource) Start(next int64) error { s.next = max(next, 0); return nil }

func (s *seqSource) Read(dst []engine.Record, limit int64) ([]engine.Record, int64, error) {
	for k := 0; k < 32 && s.next < s.n && s.next < limit; k++ {
		dst = append(dst, engine.Record{Ts: s.next, Payload: binary.LittleEndian.AppendUint64(nil, uint64(s.next))})
		s.next++
	}
	if s.next >= s.n {
		return dst, math.MaxInt64, io.EOF
	}
	return dst, s.next, nil
}

// keyer gives each record the key "k<i mod keys>" and a tag of its path.
type keyer struct {
	keys int64
	tag  byte
}

func (k keyer) Process(in []engine.Message, out *engine.Emitter) error {
	for _, m := range in {
		i := int64(binary.LittleEndian.Uint64(m.Payload))
		out.Emit(m.Ts, fmt.Appendf(nil, "k%d", i%k.keys), append([]byte{k.tag}, m.Payload...))
	}
	return nil
}

// keyedSum is a stateful sink holding, per key, the count and sum of the
// records it got by each path; it fails if a key reaches a task that the
// hash of the key does not name.
type keyedSum struct {
	index, n int
	m        map[string][2]uint64 // key+tag -> count, sum
}

func (s *keyedSum) Process(in []engine.Message, _ *engine.Emitter) error {
	for _, m := range in {
		h := fnv.New64a()
		h.Write(m.Key)
		if int(h.Sum64()%uint64(s.n)) != s.index {
			return fmt.Errorf("key %q reached task %d", m.Key, s.index)
		}
		k := string(m.Key) + "/" + string(m.Payload[0])
		v := s.m[k]
		s.m[k] = [2]uint64{v[0] + 1, v[1] + binary.LittleEndian.Uint64(m.Payload[1:])}
	}
	return nil
}

func (s *keyedSum) Snapshot(dst []byte) ([]byte, error) {
	keys := make([]string, 0, len(s.m))
	for k := range s.m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		dst = binary.AppendUvarint(dst, uint64(len(k)))
		dst = append(dst, k...)
		dst = binary.LittleEndian.AppendUint64(dst, s.m[k][0])
		dst = binary.LittleEndian.AppendUint64(dst, s.m[k][1])
	}
	return dst, nil
}

func (s *keyedSum) Restore(b []byte) error {
	s.m = map[string][2]uint64{}
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n+16 {
			return errors.New("keyedSum: bad state")
		}
		key := string(b[k : k+int(n)])
		b = b[k+int(n):]
		s.m[key] = [2]uint64{binary.LittleEndian.Uint64(b), binary.LittleEndian.Uint64(b[8:])}
		b = b[16:]
	}
	return nil
}

func (s *keyedSum) Finish() ([]byte, error) { return s.Snapshot(nil) }

// TestADiamondDeliversEveryRecordOnceByEachPath: a source feeds two
// processors, one by hash and one round robin, and both feed one keyed,
// stateful sink by hash. Every record must reach the sink once by each
// path, each key always in the task its hash names, however the job is
// laid out, with crashes and killed nodes.
func TestADiamondDeliversEveryRecordOnceByEachPath(t *testing.T) {
	const n, keys = 200000 / slow, 13
	want := map[string][2]uint64{}
	for i := uint64(0); i < n; i++ {
		for _, tag := range []string{"a", "b"} {
			k := fmt.Sprintf("k%d/%s", i%keys, tag)
			v := want[k]
			want[k] = [2]uint64{v[0] + 1, v[1] + i}
		}
	}
	cases := []struct {
		name        string
		nodes       int
		noChain     bool
		faults      string
		crash, kill time.Duration
	}{
		{name: "chained, crashes", nodes: 1, crash: 40 * time.Millisecond},
		{name: "one node on the transport, crashes", nodes: 1, noChain: true, crash: 40 * time.Millisecond},
		{name: "three nodes, crashes, kills and link faults", nodes: 3, faults: "drop=0.02,dup=0.02,reset=50ms",
			crash: 60 * time.Millisecond, kill: 100 * time.Millisecond},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, _, err := transport.ParseFaults(tc.faults, 7)
			if err != nil {
				t.Fatal(err)
			}
			f.Reset *= slow // as the crash and kill periods are
			job := &engine.Job{
				Procs: []engine.Proc{
					{Name: "src", Parallelism: 1, NewSource: func(int) (engine.Source, error) { return &seqSource{n: n}, nil }},
					{Name: "a", Parallelism: 2, NewTask: func(int) (engine.Task, error) { return keyer{keys: keys, tag: 'a'}, nil }},
					{Name: "b", Parallelism: 3, NewTask: func(int) (engine.Task, error) { return keyer{keys: keys, tag: 'b'}, nil }},
					{Name: "sum", Parallelism: 2, NewTask: func(i int) (engine.Task, error) {
						return &keyedSum{index: i, n: 2, m: map[string][2]uint64{}}, nil
					}},
				},
				Edges: []engine.Edge{
					{From: "src", To: "a", Partitioner: engine.Hash},
					{From: "src", To: "b", Partitioner: engine.RoundRobin},
					{From: "a", To: "sum", Partitioner: engine.Hash},
					{From: "b", To: "sum", Partitioner: engine.Hash},
				},
			}
			c, err := engine.NewCoordinator(job, engine.Config{Dir: filepath.Join(t.TempDir(), "data"), NoSync: true,
				Nodes: tc.nodes, NoChain: tc.noChain, Faults: f, InitialInterval: 2000, CheckpointEvery: 10 * time.Millisecond,
				Restart: ampleRestarts(tc.crash*slow, tc.kill*slow)})
			if err != nil {
				t.Fatal(err)
			}
			stop := chaos(c, faults{crash: tc.crash * slow, kill: tc.kill * slow, seed: 11})
			defer stop() // if runGuarded fails t
			res, err := runGuarded(t, c)
			stop()
			if err != nil {
				t.Fatal(err)
			}
			got := map[string][2]uint64{}
			for _, id := range []string{"3.0", "3.1"} {
				s := &keyedSum{}
				if err := s.Restore(res.Results[id]); err != nil {
					t.Fatal(err)
				}
				for k, v := range s.m {
					if _, dup := got[k]; dup {
						t.Errorf("key %s in both sink tasks", k)
					}
					got[k] = v
				}
			}
			if len(got) != len(want) {
				t.Errorf("%d keys, want %d", len(got), len(want))
			}
			for k, v := range want {
				if got[k] != v {
					t.Errorf("key %s: count, sum %v, want %v", k, got[k], v)
				}
			}
			if res.Late != 0 {
				t.Errorf("%d messages arrived below a completed checkpoint", res.Late)
			}
			if res.Recoveries == 0 {
				t.Errorf("no recovery: the faults were not exercised")
			}
			t.Logf("checkpoints %d recoveries %d crashes %d kills %d", res.Checkpoints, res.Recoveries, res.Crashes, res.Kills)
		})
	}
}
