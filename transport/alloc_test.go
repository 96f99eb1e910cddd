package transport

import (
	"bytes"
	"sync"
	"testing"
)

// A delivery's buffers go back to their pools in the boxes they came out
// of: a warm get-and-put cycle allocates nothing (boxing the slices anew at
// each put was two allocations a delivery, on every run a task's
// goroutine takes).
func TestDeliveryCycleAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("under the race detector sync.Pool drops a share of what is put")
	}
	payload := bytes.Repeat([]byte{7}, 100)
	cycle := func() {
		d := getDelivery(3, 3*len(payload))
		for i := range 3 {
			d.add(Message{Ts: int64(i), Payload: payload})
		}
		if len(d.msgs) != 3 || d.bytes != 300 || !bytes.Equal(d.msgs[2].Payload, payload) {
			t.Fatalf("delivery holds %d messages, %d bytes", len(d.msgs), d.bytes)
		}
		putDelivery(d)
	}
	cycle()
	if a := testing.AllocsPerRun(1000, cycle); a != 0 {
		t.Errorf("a warm delivery cycle allocated %.0f times, want 0", a)
	}
}

// The net backend's loop takes turns between two task lists, so queuing a
// task allocates nothing once both exist; a list grown past maxSpareTasks
// is not kept.
func TestNetLinkTasksAllocateNothing(t *testing.T) {
	l := newNetLink(nil, nil, &sync.WaitGroup{})
	ran := 0
	f := loopFunc(func() { ran++ })
	cycle := func() {
		if err := l.queue(f); err != nil {
			t.Fatal(err)
		}
		if err := l.queue(f); err != nil {
			t.Fatal(err)
		}
		if err := l.runTasks(); err != nil {
			t.Fatal(err)
		}
	}
	cycle()
	cycle()
	if a := testing.AllocsPerRun(100, cycle); a != 0 {
		t.Errorf("queuing and running tasks allocated %.0f times a cycle, want 0", a)
	}
	if want := 2 * (2 + 101); ran != want { // AllocsPerRun runs once more to warm up
		t.Errorf("ran %d tasks, want %d", ran, want)
	}

	for range maxSpareTasks + 1 {
		if err := l.queue(f); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.runTasks(); err != nil {
		t.Fatal(err)
	}
	if l.spare != nil {
		t.Errorf("kept a task list of capacity %d, want none past %d", cap(l.spare), maxSpareTasks)
	}

	// Close's marker still ends the loop.
	if err := l.queue(nil); err != nil {
		t.Fatal(err)
	}
	if err := l.runTasks(); err != errLinkClosed {
		t.Errorf("runTasks after the close marker: %v, want errLinkClosed", err)
	}
}
