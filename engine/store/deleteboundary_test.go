package store

import (
	"bytes"
	"path/filepath"
	"testing"
)

func TestDeleteBeforeKeepsASegmentWhoseNewestRecordIsAtTheCut(t *testing.T) {
	// Each batch is larger than half a segment, so each gets a segment of
	// its own: segments 1, 2, 3 hold timestamps 1, 5 and 9.
	pay := bytes.Repeat([]byte{'p'}, 40)
	dir := t.TempDir()
	l, err := Open(dir, Options{SegmentBytes: 64, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	for _, ts := range []int64{1, 5, 9} {
		if err := l.Append([]Record{{Ts: ts, Payload: pay}}); err != nil {
			t.Fatal(err)
		}
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*"+segmentExt)); len(files) != 3 {
		t.Fatalf("%d segment files, want 3", len(files))
	}
	// A checkpoint at 5 replays the record at 5: only segment 1 may go.
	removed, err := l.DeleteBefore(5)
	if err != nil {
		t.Fatal(err)
	}
	if removed != 1 {
		t.Errorf("DeleteBefore(5) removed %d segments, want 1 (the one holding only 1)", removed)
	}
	sameRecords(t, "replay from 5 after DeleteBefore(5)", replayAll(t, l, 5), []Record{{Ts: 5, Payload: pay}, {Ts: 9, Payload: pay}})
}
