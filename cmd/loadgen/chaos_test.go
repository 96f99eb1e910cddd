package main

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench/jobs"
	"github.com/sluicehq/sluice/engine"
)

// discard is a stateless sink.
type discard struct{}

func (discard) Process([]engine.Message, *engine.Emitter) error { return nil }

// TestChaosLetsEveryGenerationRunBeforeItsNextKill: with a recovery that
// takes longer than 1.5 kill periods (a task's constructor is slow after
// the first generation, as worker processes restarting on a busy machine
// are), each kill must still hit a generation that has run for about half
// a period. A kill timed from the one before would come as soon as the new
// generation began, before it could checkpoint anything.
func TestChaosLetsEveryGenerationRunBeforeItsNextKill(t *testing.T) {
	const period = 400 * time.Millisecond
	var tasks atomic.Int64
	job := &engine.Job{
		Procs: []engine.Proc{
			{Name: "gen", Parallelism: 1, NewSource: func(int) (engine.Source, error) { return &jobs.GenSource{Size: 24}, nil }},
			{Name: "sink", Parallelism: 2, NewTask: func(int) (engine.Task, error) {
				if tasks.Add(1) > 2 { // a restart, not the first generation
					time.Sleep(2 * period)
				}
				return discard{}, nil
			}},
		},
		Edges: []engine.Edge{{From: "gen", To: "sink", Partitioner: engine.Hash}},
	}
	// When each generation was first seen running, and how long each kill
	// came after that: a late look at a generation's start only shortens
	// what is measured.
	var mu sync.Mutex
	seen := map[uint64]time.Time{}
	var ran []time.Duration
	kills := make(chan struct{}, 16)
	var c *engine.Coordinator
	cfg := engine.Config{Dir: filepath.Join(t.TempDir(), "data"), NoSync: true, Nodes: 2,
		OnEvent: func(kind, _ string) {
			if kind != "kill" {
				return
			}
			g := c.Stats().Generation
			mu.Lock()
			if at, ok := seen[g]; ok {
				ran = append(ran, time.Since(at))
			}
			mu.Unlock()
			kills <- struct{}{}
		}}
	c, err := engine.NewCoordinator(job, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for ctx.Err() == nil {
			g := c.Stats().Generation
			mu.Lock()
			if _, ok := seen[g]; !ok && g > 0 {
				seen[g] = time.Now()
			}
			mu.Unlock()
			time.Sleep(time.Millisecond)
		}
	}()
	ended := make(chan error, 1)
	go func() {
		_, err := c.Run(ctx)
		ended <- err
	}()
	stop := chaos(c, 0, period, 1)
	const want = 3
	for i := 0; i < want; i++ {
		select {
		case <-kills:
		case err := <-ended:
			t.Fatalf("the run ended after %d kills: %v", i, err)
		case <-time.After(time.Minute):
			t.Fatalf("%d kills in a minute, want %d", i, want)
		}
	}
	stop()
	cancel()
	<-ended
	<-watched
	mu.Lock()
	defer mu.Unlock()
	if len(ran) < want {
		t.Fatalf("%d kills timed against their generation's start, want %d", len(ran), want)
	}
	for i, d := range ran {
		// At least period/2 by design; the margin is for a late look.
		if d < period/8 {
			t.Errorf("kill %d hit a generation %v after it was seen to start, want about %v at least", i+1, d.Round(time.Millisecond), period/2)
		}
	}
	t.Logf("kills came %v after their generations started", ran)
}
