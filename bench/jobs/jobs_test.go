package jobs

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/engine"
)

// sink runs the pipeline's Sum over the given message numbers (with their
// keys) and returns its encoded result.
func sink(t *testing.T, keys int, ids ...uint64) []byte {
	t.Helper()
	s := &Sum{Keys: keys, seen: map[uint64]*Seen{}}
	var in []engine.Message
	for _, i := range ids {
		p := make([]byte, 16)
		binary.LittleEndian.PutUint64(p[8:], i)
		in = append(in, engine.Message{Ts: int64(i), Key: binary.LittleEndian.AppendUint64(nil, i%uint64(keys)), Payload: p})
	}
	if err := s.Process(in, &engine.Emitter{}); err != nil {
		t.Fatal(err)
	}
	b, err := s.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func generated(n uint64) []byte { return binary.LittleEndian.AppendUint64(nil, n) }

func TestCheckPipelineFindsEachLostAndRepeatedMessage(t *testing.T) {
	const keys = 64
	all := make([]uint64, 0, 256)
	for i := range uint64(256) {
		all = append(all, i)
	}
	var without []uint64 // key 0 holds 64 and 128 twice and lacks 0 and 192: count and sum as if right
	for _, i := range all {
		if i != 0 && i != 192 {
			without = append(without, i)
		}
	}
	without = append(without, 64, 128)
	tests := []struct {
		name        string
		ids         []uint64
		lost, dup   int64
		delivered   int64
		diffMention string
	}{
		{"every message once, in order", all, 0, 0, 256, ""},
		{"every message once, out of order", append(append([]uint64{}, all[128:]...), all[:128]...), 0, 0, 256, ""},
		{"two lost and two repeated with the same count and sum", without, 2, 2, 256, "key 0: 2 of 4 messages arrived, 2 missing, 2 arrived again"},
		{"one lost", all[1:], 1, 0, 255, "key 0"},
		{"one repeated", append(append([]uint64{}, all...), 200), 0, 1, 257, "key 8"},
		{"one never generated", append(append([]uint64{}, all...), 256), 0, 1, 257, "key 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The keys are split between two sinks, as the hash partitioner does.
			var a, b []uint64
			for _, i := range tt.ids {
				if i%keys < keys/2 {
					a = append(a, i)
				} else {
					b = append(b, i)
				}
			}
			res := map[string][]byte{"0.0": generated(256), "2.0": sink(t, keys, a...), "2.1": sink(t, keys, b...)}
			c, err := CheckPipeline(res, keys)
			if err != nil {
				t.Fatal(err)
			}
			if c.Generated != 256 || c.Lost != tt.lost || c.Duplicated != tt.dup || c.Delivered != tt.delivered {
				t.Errorf("got %+v, want 256 generated, %d delivered, %d lost, %d duplicated", c, tt.delivered, tt.lost, tt.dup)
			}
			if !strings.Contains(c.Diff, tt.diffMention) || (tt.diffMention == "") != (c.Diff == "") {
				t.Errorf("diff %q, want it to mention %q", c.Diff, tt.diffMention)
			}
		})
	}
}

func TestCheckPipelineRefusesMalformedResults(t *testing.T) {
	good := sink(t, 4, 0, 1, 2, 3)
	for name, res := range map[string]map[string][]byte{
		"no source result":       {"2.0": good},
		"a truncated sink state": {"0.0": generated(4), "2.0": good[:len(good)-1]},
		"a key in two sinks":     {"0.0": generated(4), "2.0": good, "2.1": good},
		"trailing bytes":         {"0.0": generated(4), "2.0": append(append([]byte{}, good...), 0)},
	} {
		if _, err := CheckPipeline(res, 4); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestSumRefusesAMessageUnderAnotherKey(t *testing.T) {
	s := &Sum{Keys: 4, seen: map[uint64]*Seen{}}
	p := make([]byte, 16)
	binary.LittleEndian.PutUint64(p[8:], 5) // key 1
	if err := s.Process([]engine.Message{{Key: binary.LittleEndian.AppendUint64(nil, 2), Payload: p}}, &engine.Emitter{}); err == nil {
		t.Error("message 5 under key 2 was accepted")
	}
}

func FuzzSumRestore(f *testing.F) {
	f.Add(sink(&testing.T{}, 4, 0, 1, 2, 3, 9, 100))
	f.Add([]byte{})
	f.Add([]byte{1, 0, 0, 0, 200})
	f.Fuzz(func(t *testing.T, b []byte) {
		var s Sum
		if err := s.Restore(b); err != nil {
			return
		}
		again, _ := s.Snapshot(nil)
		var s2 Sum
		if err := s2.Restore(again); err != nil {
			t.Fatalf("a state that decoded does not decode once re-encoded: %v", err)
		}
	})
}

func TestReferenceCountsSplitsLikeStringsFields(t *testing.T) {
	text := "a  b\tc\n\nd\v\fe\r\nf\u0085g\u00a0h i\u2003j \xff\xfe k\xffl über\n  \n" + strings.Repeat("x", 300000) + " a"
	got, err := ReferenceCounts(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	for _, w := range strings.Fields(text) {
		want[w]++
	}
	if lost, dup, diff := CompareCounts(got, want); lost != 0 || dup != 0 {
		t.Errorf("reference differs from strings.Fields: %v", diff)
	}
	if got["a"] != 2 || got["\xff\xfe"] != 1 || got["k\xffl"] != 1 {
		t.Errorf("counts %v", got)
	}
}

func TestCompareCountsReportsLostAndDuplicatedSeparately(t *testing.T) {
	want := map[string]int64{"a": 3, "b": 2, "c": 1}
	got := map[string]int64{"a": 5, "b": 1, "d": 1} // a +2, b -1, c -1, d +1: nets to +1
	lost, dup, diff := CompareCounts(got, want)
	if lost != 2 || dup != 3 || len(diff) != 4 {
		t.Errorf("lost %d dup %d diff %v, want 2, 3 and four differences", lost, dup, diff)
	}
	if lost, dup, diff := CompareCounts(want, want); lost != 0 || dup != 0 || diff != nil {
		t.Errorf("equal counts: lost %d dup %d diff %v", lost, dup, diff)
	}
}

func TestDecodeCountsRefusesWhatAppendCountsNeverWrites(t *testing.T) {
	good := AppendCounts(nil, map[string]int64{"a": 2})
	twice := append(binary.AppendUvarint(nil, 2), good[1:]...)
	twice = append(twice, good[1:]...)
	for name, b := range map[string][]byte{
		"empty":                 nil,
		"cut short":             good[:len(good)-1],
		"trailing bytes":        append(bytes.Clone(good), 0),
		"a word twice":          twice,
		"a count beyond int64":  binary.AppendUvarint(append(binary.AppendUvarint(nil, 1), 1, 'a'), 1<<63),
		"more words than bytes": binary.AppendUvarint(nil, 1<<40),
	} {
		if m, err := DecodeCounts(b); err == nil {
			t.Errorf("%s: %x decoded as %v", name, b, m)
		}
	}
}

// FuzzDecodeCounts: counts read back from a checkpoint or a task's result
// either fail to decode or are exactly what AppendCounts writes for them.
func FuzzDecodeCounts(f *testing.F) {
	f.Add([]byte{})
	f.Add(AppendCounts(nil, map[string]int64{}))
	f.Add(AppendCounts(nil, map[string]int64{"a": 1, "": 0, "über": 1 << 40}))
	f.Add([]byte{1, 1, 'a', 0x80, 0x00}) // a count written in two bytes
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeCounts(b)
		if err != nil {
			return
		}
		again, err := DecodeCounts(AppendCounts(nil, m))
		if err != nil || len(again) != len(m) {
			t.Fatalf("%v re-encoded decodes as %v, %v", m, again, err)
		}
		for w, c := range m {
			if c < 0 || again[w] != c {
				t.Fatalf("%q: %d, re-encoded %d", w, c, again[w])
			}
		}
	})
}

// TestBuildRefusesSpecsOutOfRange: a spec that may come over the network
// is checked field by field before anything is made for it.
func TestBuildRefusesSpecsOutOfRange(t *testing.T) {
	ok := Spec{Kind: "pipeline", Size: 100}
	if j, err := Build(ok, nil); err != nil || j.Procs[1].Parallelism != 2 || j.Procs[2].Parallelism != 2 {
		t.Fatalf("Build(%+v) = %v, %v: want parallelism 2 by default", ok, j, err)
	}
	for name, s := range map[string]Spec{
		"an unknown kind":          {Kind: "sort"},
		"negative parallelism":     {Kind: "wordcount", Middle: -1},
		"parallelism over the max": {Kind: "wordcount", Last: engine.MaxParallelism + 1},
		"messages too small":       {Kind: "pipeline", Size: 23},
		"messages too large":       {Kind: "pipeline", Size: MaxPipelineSize + 1},
		"negative keys":            {Kind: "pipeline", Size: 100, Keys: -1},
		"keys over the max":        {Kind: "pipeline", Size: 100, Keys: MaxKeys + 1},
		"a negative limit":         {Kind: "pipeline", Size: 100, Limit: -1},
	} {
		if j, err := Build(s, nil); err == nil {
			t.Errorf("%s: Build(%+v) made a job of %d processors", name, s, len(j.Procs))
		}
	}
	for _, s := range []Spec{
		{Kind: "pipeline", Size: MaxPipelineSize, Keys: MaxKeys, Middle: engine.MaxParallelism},
		{Kind: "wordcount", Middle: 1, Last: engine.MaxParallelism},
	} {
		j, err := Build(s, nil)
		if err == nil {
			err = j.Validate()
		}
		if err != nil {
			t.Errorf("Build(%+v) at the limits: %v", s, err)
		}
	}
}

// WriteCounts writes every word, sorted by byte order, once, as
// word<TAB>count lines each ending in a newline: the expected text is
// written out by hand, not by the function under test.
func TestWriteCountsWritesEveryWordSorted(t *testing.T) {
	var b bytes.Buffer
	if err := WriteCounts(&b, map[string]int64{"b": 2, "a": 1, "é": 7, "Z": 3}); err != nil {
		t.Fatal(err)
	}
	if want := "Z\t3\na\t1\nb\t2\né\t7\n"; b.String() != want {
		t.Errorf("WriteCounts wrote %q, want %q", b.String(), want)
	}
}
