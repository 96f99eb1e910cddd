package journal

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// documentedRecord frames body as the layout in format.go says, without the
// package's encoder: journals written by one build must resume in the next.
func documentedRecord(kind byte, body []byte) []byte {
	h := binary.LittleEndian.AppendUint32(make([]byte, 4), uint32(len(body)))
	h = append(h, kind)
	sum := crc32.Checksum(append(bytes.Clone(h[4:9]), body...), crc32.MakeTable(crc32.Castagnoli))
	binary.LittleEndian.PutUint32(h[0:4], sum)
	return append(h, body...)
}

// body builds a record body field by field: unsigned varints, zigzag
// varints, single bytes and length-prefixed strings.
type body []byte

func (b body) u(v uint64) body   { return binary.AppendUvarint(b, v) }
func (b body) z(v int64) body    { return binary.AppendVarint(b, v) }
func (b body) byte(c byte) body  { return append(b, c) }
func (b body) str(s string) body { return append(b.u(uint64(len(s))), s...) }

func TestEachRecordKindHasItsDocumentedEncoding(t *testing.T) {
	cases := []struct {
		r    Record
		kind byte
		body body
	}{
		{&Job{Config: []byte("cfg"), Shape: "a*1 b*2", Nodes: 2, Placement: []int{0, 1, 300}}, 1,
			body{}.str("cfg").str("a*1 b*2").u(2).u(3).u(0).u(1).u(300)},
		{&Generation{Gen: 7, Restore: -300, HasRestore: true, Interval: 4096}, 2, body{}.u(7).z(-300).byte(1).z(4096)},
		{&Generation{Gen: 200, Interval: 1}, 2, body{}.u(200).z(0).byte(0).z(1)},
		{&Checkpoint{Gen: 9, Ts: 1 << 40, Interval: -1}, 3, body{}.u(9).z(1 << 40).z(-1)},
		{&Commit{Gen: 300, Keep: 70000}, 4, body{}.u(300).z(70000)},
	}
	for _, c := range cases {
		want := documentedRecord(c.kind, c.body)
		got, err := AppendRecord(nil, c.r)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("AppendRecord(%+v) =\n%x\nwant the documented\n%x", c.r, got, want)
		}
		r, n, err := DecodeRecord(want)
		if err != nil || n != len(want) || !reflect.DeepEqual(r, c.r) {
			t.Errorf("DecodeRecord of the documented %x = %+v, %d, %v; want %+v, %d", want, r, n, err, c.r, len(want))
		}
	}
}

func TestAJournalWrittenToTheDocumentedLayoutResumes(t *testing.T) {
	b := []byte("SLJN\x00\x00\x00\x02")
	b = append(b, documentedRecord(1, body{}.str("cfg").str("s").u(1).u(1).u(0))...)
	b = append(b, documentedRecord(2, body{}.u(3).z(0).byte(0).z(100))...)
	b = append(b, documentedRecord(3, body{}.u(3).z(500).z(200))...)
	b = append(b, documentedRecord(4, body{}.u(3).z(500))...)
	path := filepath.Join(t.TempDir(), "journal")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	st, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	want := State{Job: &Job{Config: []byte("cfg"), Shape: "s", Nodes: 1, Placement: []int{0}}, Gen: 3,
		Checkpoint: 500, HasCheckpoint: true, Interval: 200, Floor: 500, HasFloor: true,
		Generations: 1, Checkpoints: 1, Commits: 1}
	if !reflect.DeepEqual(st, want) {
		t.Errorf("state %+v (job %+v), want %+v (job %+v)", st, st.Job, want, want.Job)
	}
}
