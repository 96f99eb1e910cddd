package store

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
)

// documentedBatch builds a batch byte by byte from the layout in format.go,
// without the package's encoder: segments written by one build must replay
// in the next.
func documentedBatch(count uint32, minTs, maxTs int64, body []byte) []byte {
	b := []byte("SLB1")
	b = binary.LittleEndian.AppendUint32(b, uint32(len(body)))
	b = binary.LittleEndian.AppendUint32(b, count)
	b = binary.LittleEndian.AppendUint64(b, uint64(minTs))
	b = binary.LittleEndian.AppendUint64(b, uint64(maxTs))
	sum := crc32.Checksum(append(bytes.Clone(b[4:28]), body...), crc32.MakeTable(crc32.Castagnoli))
	b = binary.LittleEndian.AppendUint32(b, sum)
	return append(b, body...)
}

func TestASegmentHoldsBatchesInTheDocumentedLayout(t *testing.T) {
	// Timestamps out of order, so that the minimum and maximum differ
	// from the first and last; an empty payload; a delta past one byte.
	recs := []Record{{Ts: 1000, Payload: []byte("ab")}, {Ts: 7, Payload: nil}, {Ts: 400, Payload: []byte("xyz")}}
	body := []byte{}
	for _, r := range recs {
		body = binary.AppendUvarint(body, uint64(r.Ts-7))
		body = binary.AppendUvarint(body, uint64(len(r.Payload)))
		body = append(body, r.Payload...)
	}
	second := []Record{{Ts: -5, Payload: []byte("q")}}
	body2 := []byte{0, 1, 'q'}
	want := append(documentedBatch(3, 7, 1000, body), documentedBatch(1, -5, -5, body2)...)

	dir := t.TempDir()
	l, err := Open(dir, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range [][]Record{recs, second} {
		if err := l.Append(b); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dir, "00000000000000000001.seg"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("Append wrote\n%x\nwant the documented\n%x", got, want)
	}

	// A segment written to the documented layout replays.
	dir2 := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir2, "00000000000000000001.seg"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	l2, err := Open(dir2, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l2.Close()
	if l2.Recovered() != 0 {
		t.Errorf("Open cut %d bytes of a documented segment", l2.Recovered())
	}
	sameRecords(t, "replay of a documented segment", replayAll(t, l2, -10), append(append([]Record{}, recs...), second...))
	sameRecords(t, "replay from 400", replayAll(t, l2, 400), []Record{recs[0], recs[2]})
}
