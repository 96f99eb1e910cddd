package engine

import (
	"context"
	"encoding/binary"
	"io"
	"math"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// twoRecords reads a record at 1 and one at 2, then ends.
type twoRecords struct{ next int64 }

func (s *twoRecords) Start(int64) error { return nil }

func (s *twoRecords) Read(dst []Record, limit int64) ([]Record, int64, error) {
	if s.next > 2 {
		return dst, math.MaxInt64, io.EOF
	}
	if s.next == 0 {
		s.next = 1
	}
	if s.next >= limit {
		return dst, s.next, nil
	}
	dst = append(dst, Record{Ts: s.next, Payload: binary.LittleEndian.AppendUint64(nil, uint64(s.next))})
	s.next++
	return dst, s.next, nil
}

// TestAKillThatClaimedAGenerationLandsBeforeItEnds: a Kill claims
// generation 1 in its first clock round and is held before it kills the
// node (the goroutine of a chaos driver descheduled there). The generation
// then reaches the end of its input. Its end must wait for the kill to land
// in it, and recover from it: one kill, one recovery. Before, drive handed
// the generation back without looking at Kill, and the run ended, with
// no recovery, while the kill was still to land: on a node of the run's
// next generation, or after the run.
func TestAKillThatClaimedAGenerationLandsBeforeItEnds(t *testing.T) {
	job := &Job{
		Procs: []Proc{
			{Name: "src", Parallelism: 1, NewSource: func(int) (Source, error) { return &twoRecords{}, nil }},
			{Name: "sink", Parallelism: 1, NewTask: func(int) (Task, error) { return passTask{}, nil }},
		},
		Edges: []Edge{{From: "src", To: "sink", Partitioner: Hash}},
	}
	c, err := NewCoordinator(job, Config{Dir: filepath.Join(t.TempDir(), "data"), NoSync: true,
		Restart: RestartPolicy{MaxRestarts: 1, MinBackoff: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	claimed, proceed := make(chan struct{}), make(chan struct{})
	var proceedOnce sync.Once
	release := func() { proceedOnce.Do(func() { close(proceed) }) }
	c.killClaimed = func() {
		close(claimed)
		<-proceed
	}
	c.killWait = release // the generation's end waits for the kill: let it land
	killed := make(chan error, 1)
	var once sync.Once
	c.clockCall = func(_ int, call func() (Response, error)) (Response, error) {
		once.Do(func() {
			go func() { killed <- c.Kill(0) }()
			<-claimed
		})
		return call()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute) // a hang guard
	defer cancel()
	res, err := c.Run(ctx)
	select {
	case <-killed:
	default:
		t.Errorf("Run returned while the Kill that claimed generation 1 had not yet killed its node")
		release()
		<-killed
	}
	if err != nil {
		t.Fatal(err)
	}
	if res.Kills != 1 || res.Recoveries != 1 {
		t.Errorf("%d kills, %d recoveries: want one recovery for the one kill", res.Kills, res.Recoveries)
	}
}
