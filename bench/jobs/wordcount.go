package jobs

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"unicode"
	"unicode/utf8"

	"github.com/sluicehq/sluice/engine"
)

// WordCount is lines -> split (round robin) -> count (hash by word). The
// line source gives line i the timestamp i.
func WordCount(spec Spec) *engine.Job {
	spec.Middle, spec.Last = max(spec.Middle, 1), max(spec.Last, 1)
	return &engine.Job{
		Procs: []engine.Proc{
			{Name: "lines", Parallelism: 1, NewSource: func(int) (engine.Source, error) { return &LineSource{Path: spec.Input}, nil }},
			{Name: "split", Parallelism: spec.Middle, NewTask: func(int) (engine.Task, error) { return Split{}, nil }},
			{Name: "count", Parallelism: spec.Last, NewTask: func(int) (engine.Task, error) { return &Count{counts: map[string]int64{}}, nil }},
		},
		Edges: []engine.Edge{
			{From: "lines", To: "split", Partitioner: engine.RoundRobin},
			{From: "split", To: "count", Partitioner: engine.Hash},
		},
	}
}

// LineSource reads the lines of a file; line i (from 0) has timestamp i.
type LineSource struct {
	Path string
	f    *os.File
	r    *bufio.Reader
	next int64
	buf  []byte
}

// Start opens the file and skips to line next.
func (s *LineSource) Start(next int64) error {
	f, err := os.Open(s.Path)
	if err != nil {
		return err
	}
	s.f, s.r = f, bufio.NewReaderSize(f, 256<<10)
	for s.next < next {
		if _, err := s.r.ReadSlice('\n'); err != nil {
			if err == bufio.ErrBufferFull {
				continue
			}
			if err == io.EOF {
				break
			}
			return err
		}
		s.next++
	}
	return nil
}

// Read returns up to 1024 lines below limit.
func (s *LineSource) Read(dst []engine.Record, limit int64) ([]engine.Record, int64, error) {
	s.buf = s.buf[:0]
	var offs []int
	start := len(dst)
	var rerr error
	for n := 0; n < 1024 && s.next < limit; n++ {
		line, err := s.r.ReadSlice('\n')
		for err == bufio.ErrBufferFull {
			s.buf = append(s.buf, line...)
			line, err = s.r.ReadSlice('\n')
		}
		if len(line) == 0 && err == io.EOF {
			rerr = io.EOF
			break
		}
		off := len(s.buf)
		s.buf = append(s.buf, line...)
		_ = off
		offs = append(offs, len(s.buf))
		dst = append(dst, engine.Record{Ts: s.next})
		s.next++
		if err == io.EOF {
			rerr = io.EOF
			break
		}
		if err != nil {
			return dst, s.next, err
		}
	}
	prev := 0
	for i := range offs {
		dst[start+i].Payload = s.buf[prev:offs[i]]
		prev = offs[i]
	}
	if rerr == io.EOF {
		s.f.Close()
	}
	return dst, s.next, rerr
}

// Split emits every word of a line (bytes.Fields, which splits like
// strings.Fields) keyed by the word.
type Split struct{}

// Process splits each line.
func (Split) Process(in []engine.Message, out *engine.Emitter) error {
	for _, m := range in {
		for _, w := range bytes.Fields(m.Payload) {
			out.Emit(m.Ts, w, nil)
		}
	}
	return nil
}

// Count counts words; its checkpointed state is the counts.
type Count struct{ counts map[string]int64 }

// Process counts.
func (c *Count) Process(in []engine.Message, _ *engine.Emitter) error {
	for _, m := range in {
		c.counts[string(m.Key)]++
	}
	return nil
}

// Snapshot encodes the counts.
func (c *Count) Snapshot(dst []byte) ([]byte, error) { return AppendCounts(dst, c.counts), nil }

// Restore decodes counts.
func (c *Count) Restore(b []byte) error {
	m, err := DecodeCounts(b)
	if err != nil {
		return err
	}
	c.counts = m
	return nil
}

// Finish returns the final counts.
func (c *Count) Finish() ([]byte, error) { return AppendCounts(nil, c.counts), nil }

// AppendCounts encodes counts: uvarint n, then n times (uvarint len, word,
// uvarint count), in map order: the state is snapshotted at every
// checkpoint (twice, with the checkpoint copy), and sorting 10^5 words
// cost more than encoding them; WriteCounts sorts the final output.
func AppendCounts(dst []byte, m map[string]int64) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(m)))
	for k, v := range m {
		dst = binary.AppendUvarint(dst, uint64(len(k)))
		dst = append(dst, k...)
		dst = binary.AppendUvarint(dst, uint64(v))
	}
	return dst
}

var errCounts = errors.New("jobs: malformed counts")

// DecodeCounts inverts AppendCounts. It refuses what AppendCounts never
// writes: a word twice, a count beyond int64, bytes after the last count.
func DecodeCounts(b []byte) (map[string]int64, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k)/2 { // a word takes two bytes at least
		return nil, errCounts
	}
	b = b[k:]
	m := make(map[string]int64, n)
	for range n {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return nil, errCounts
		}
		w := string(b[k : k+int(l)])
		b = b[k+int(l):]
		c, k2 := binary.Uvarint(b)
		if k2 <= 0 || c > math.MaxInt64 {
			return nil, errCounts
		}
		if _, dup := m[w]; dup {
			return nil, errCounts
		}
		b = b[k2:]
		m[w] = int64(c)
	}
	if len(b) != 0 {
		return nil, errCounts
	}
	return m, nil
}

// MergeCounts adds the counts in results (one encoded map per count task;
// other tasks' results are skipped by name prefix "2.").
func MergeCounts(results map[string][]byte) (map[string]int64, error) {
	all := map[string]int64{}
	for id, b := range results {
		if len(id) < 2 || id[:2] != "2." {
			continue
		}
		m, err := DecodeCounts(b)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", id, err)
		}
		for k, v := range m {
			all[k] += v
		}
	}
	return all, nil
}

// WriteCounts writes "word<TAB>count" lines sorted by word in byte order.
func WriteCounts(w io.Writer, m map[string]int64) error {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	bw := bufio.NewWriter(w)
	for _, k := range keys {
		fmt.Fprintf(bw, "%s\t%d\n", k, m[k])
	}
	return bw.Flush()
}

// ReferenceCounts counts the words of r for checking the job's output,
// independently of its path: no lines, no bytes.Fields, no LineSource or
// Split; a word is a maximal run of runes that are not unicode.IsSpace
// (strings.Fields' definition; an invalid UTF-8 byte is a rune that is not
// a space).
func ReferenceCounts(r io.Reader) (map[string]int64, error) {
	m := map[string]int64{}
	br := bufio.NewReaderSize(r, 256<<10)
	var word []byte
	for {
		c, size, err := br.ReadRune()
		if err == io.EOF {
			if len(word) > 0 {
				m[string(word)]++
			}
			return m, nil
		}
		if err != nil {
			return nil, err
		}
		if unicode.IsSpace(c) {
			if len(word) > 0 {
				m[string(word)]++
				word = word[:0]
			}
			continue
		}
		if c == utf8.RuneError && size == 1 {
			word = append(word, 0xff) // placeholder, replaced below
			if err := br.UnreadRune(); err != nil {
				return nil, err
			}
			b, _ := br.ReadByte()
			word[len(word)-1] = b
			continue
		}
		word = utf8.AppendRune(word, c)
	}
}

// CompareCounts compares the job's counts with the reference: lost is
// how many occurrences of words the job counted too few times, dup how
// many it counted too often (each word's shortfall and excess added up
// separately, never netted), diff describes the first few differences.
func CompareCounts(got, want map[string]int64) (lost, dup int64, diff []string) {
	note := func(w string, g, x int64) {
		if len(diff) < 5 {
			diff = append(diff, fmt.Sprintf("word %q: counted %d, want %d", w, g, x))
		}
	}
	for w, x := range want {
		if g := got[w]; g < x {
			lost += x - g
			note(w, g, x)
		} else if g > x {
			dup += g - x
			note(w, g, x)
		}
	}
	for w, g := range got {
		if _, ok := want[w]; !ok {
			dup += g
			note(w, g, 0)
		}
	}
	return lost, dup, diff
}
