package engine_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/engine/jobs"
	"github.com/sluicehq/sluice/transport"
)

// writeText writes lines of random words (with repeats, odd spacing and
// some non-ASCII) and returns the path.
func writeText(t *testing.T, lines int, seed uint64) string {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, 1))
	words := []string{"the", "a", "sluice", "gate", "water", "flow", "über", "naïve", "x", "y", "z", "exactly", "once"}
	var b strings.Builder
	for i := range lines {
		n := rng.IntN(12)
		for j := range n {
			if j > 0 {
				b.WriteString([]string{" ", "  ", "\t"}[rng.IntN(3)])
			}
			w := words[rng.IntN(len(words))]
			if rng.IntN(20) == 0 {
				w = fmt.Sprintf("w%d", rng.IntN(500))
			}
			b.WriteString(w)
		}
		if i%17 == 0 {
			b.WriteString("   ")
		}
		b.WriteByte('\n')
	}
	p := filepath.Join(t.TempDir(), "input.txt")
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func runWordCount(t *testing.T, input string, cfg engine.Config) (*engine.Result, map[string]int64) {
	t.Helper()
	job := jobs.WordCount(jobs.Spec{Kind: "wordcount", Input: input, Middle: 2, Last: 2})
	if cfg.Dir == "" {
		cfg.Dir = filepath.Join(t.TempDir(), "data")
	}
	cfg.NoSync = true
	c, err := engine.NewCoordinator(job, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := c.Run(ctx)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	got, err := jobs.MergeCounts(res.Results)
	if err != nil {
		t.Fatal(err)
	}
	return res, got
}

func reference(t *testing.T, input string) map[string]int64 {
	t.Helper()
	b, err := os.ReadFile(input)
	if err != nil {
		t.Fatal(err)
	}
	m, err := jobs.ReferenceCounts(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func sameCounts(t *testing.T, got, want map[string]int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("got %d distinct words, want %d", len(got), len(want))
	}
	n := 0
	for k, v := range want {
		if got[k] != v {
			if n++; n <= 5 {
				t.Errorf("word %q: got %d, want %d", k, got[k], v)
			}
		}
	}
}

func TestWordCountEqualsReferenceWithoutFaults(t *testing.T) {
	input := writeText(t, 20000, 1)
	res, got := runWordCount(t, input, engine.Config{InitialInterval: 500})
	sameCounts(t, got, reference(t, input))
	if res.Checkpoints == 0 {
		t.Errorf("no checkpoint was taken")
	}
	if res.Late != 0 {
		t.Errorf("%d messages arrived below a completed checkpoint", res.Late)
	}
	t.Logf("checkpoints %d recoveries %d", res.Checkpoints, res.Recoveries)
}

func TestWordCountSurvivesCrashes(t *testing.T) {
	input := writeText(t, 40000, 2)
	policy := engine.RestartPolicy{MaxRestarts: 100, Window: time.Minute, MinBackoff: time.Millisecond, MaxBackoff: 10 * time.Millisecond}
	res, got := runWordCount(t, input, engine.Config{InitialInterval: 500, CrashEvery: 30 * time.Millisecond, Restart: policy, Seed: 3})
	sameCounts(t, got, reference(t, input))
	if res.Recoveries == 0 || res.Crashes == 0 {
		t.Errorf("recoveries %d crashes %d: the fault was not exercised", res.Recoveries, res.Crashes)
	}
	t.Logf("checkpoints %d recoveries %d crashes %d filtered %d", res.Checkpoints, res.Recoveries, res.Crashes, res.Filtered)
}

func TestRestartPolicyExhaustionIsAClearError(t *testing.T) {
	input := writeText(t, 200000, 3)
	job := jobs.WordCount(jobs.Spec{Kind: "wordcount", Input: input})
	c, err := engine.NewCoordinator(job, engine.Config{Dir: t.TempDir(), NoSync: true, CrashEvery: 5 * time.Millisecond,
		Restart: engine.RestartPolicy{MaxRestarts: 2, Window: time.Minute, MinBackoff: time.Millisecond, MaxBackoff: time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err = c.Run(ctx)
	if !errors.Is(err, engine.ErrRestartsExhausted) {
		t.Fatalf("got %v, want ErrRestartsExhausted", err)
	}
	if !strings.Contains(err.Error(), "injected crash") {
		t.Errorf("error %q does not name the last failure", err)
	}
}

var _ = transport.Faults{}
