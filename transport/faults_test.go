package transport

import (
	"bytes"
	"testing"

	"github.com/sluicehq/sluice/wire"
)

// frameOf is a frame of type t whose body names it: i, as one byte.
func frameOf(t wire.FrameType, i int) []byte {
	b, start := wire.BeginFrame(nil, t, 0)
	return wire.FinishFrame(append(b, byte(i)), start)
}

// The fault link cuts each write into frames and sends each as many times
// as its model says; what it drops and duplicates is what its counters
// say, frame types it must not touch pass once, in order, and nothing
// passes through changed before it is armed.
func TestTheFaultLinkDropsAndDuplicatesWholeFramesAsItCounts(t *testing.T) {
	var n faultCounters
	rec := &recLink{}
	l := &faultLink{link: rec, now: func() int64 { return 0 },
		model: newFaultModel(Faults{Drop: 0.3, CtrlDrop: 0.3, Dup: 0.2, Seed: 5}, 1, &n)}

	preface := []byte("not a frame")
	if _, err := l.Write(preface); err != nil || !bytes.Equal(rec.wrote, preface) {
		t.Fatalf("before arm: wrote %q (err %v), want the bytes as given", rec.wrote, err)
	}
	rec.wrote = nil
	l.arm()

	types := []wire.FrameType{wire.FrameData, wire.FrameAckRequest, wire.FrameAck, wire.FramePing,
		wire.FramePong, wire.FrameOpen, wire.FrameClose, wire.FrameGoAway}
	var sent []wire.FrameType
	for i := range 80 { // 240 frames, each numbered by one byte
		// Two frames in one slice, one in the next: frames, not slices,
		// are what the model judges.
		a, b, c := types[i%len(types)], types[(i+3)%len(types)], types[(i+5)%len(types)]
		sent = append(sent, a, b, c)
		one := append(frameOf(a, len(sent)-3), frameOf(b, len(sent)-2)...)
		if _, err := l.Writev([][]byte{one, frameOf(c, len(sent)-1)}); err != nil {
			t.Fatal(err)
		}
	}

	var got []int
	for off := 0; off < len(rec.wrote); {
		f, k, err := wire.DecodeFrame(rec.wrote[off:], 0)
		if err != nil {
			t.Fatalf("at %d of the output: %v", off, err)
		}
		if f.Type != sent[f.Body[0]] {
			t.Fatalf("frame %d came out as %v, was sent as %v", f.Body[0], f.Type, sent[f.Body[0]])
		}
		got = append(got, int(f.Body[0]))
		off += k
	}
	copies := make([]int, len(sent))
	last := -1
	for _, i := range got {
		if i < last {
			t.Fatalf("frame %d came out after frame %d", i, last)
		}
		last = i
		copies[i]++
	}
	var dropData, dropCtrl, dup uint64
	for i, k := range copies {
		switch tp := sent[i]; {
		case k == 2:
			dup++
		case k == 0 && tp == wire.FrameData:
			dropData++
		case k == 0:
			dropCtrl++
		}
		if k != 1 && (sent[i] == wire.FrameOpen || sent[i] == wire.FrameClose || sent[i] == wire.FrameGoAway) {
			t.Errorf("a %v frame came out %d times; the model must not touch it", sent[i], k)
		}
	}
	s := n.snapshot()
	if s.DataDropped != dropData || s.CtrlDropped != dropCtrl || s.Duplicated != dup {
		t.Errorf("counters %+v; the output shows %d data and %d control frames dropped, %d duplicated", s, dropData, dropCtrl, dup)
	}
	if dropData == 0 || dropCtrl == 0 || dup == 0 {
		t.Errorf("dropped %d data and %d control frames, duplicated %d: want some of each", dropData, dropCtrl, dup)
	}
}

// A node that injects faults writes through its fault link only: its
// connections make no direct writes, which would bypass it.
func TestAConnectionWithFaultsHasNoDirectWrites(t *testing.T) {
	n := testNode(t, WithFaults(Faults{Drop: 0.1, Seed: 1}))
	c := newConn(n, nil, 0)
	c.setLink(&recLink{}, 0) // fd 0 would be duplicated for direct writes
	if c.faults == nil || c.lk != link(c.faults) {
		t.Fatal("the link is not wrapped in a fault link")
	}
	if c.fd >= 0 {
		t.Errorf("direct writes are enabled on fd %d", c.fd)
	}
}
