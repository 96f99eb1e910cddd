package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench"

	"github.com/sluicehq/sluice/cmd/loadgen/internal/control"
	"github.com/sluicehq/sluice/transport"
)

func TestAgentsWithAKeyTakePlansOnlyFromACoordinatorThatHoldsIt(t *testing.T) {
	key := bytes.Repeat([]byte("k"), 32)
	keyed := func() *testAgent {
		return startAgentWith(t, func(a *agent) {
			a.key = key
			a.opts = []transport.Option{transport.WithKey(key)}
		})
	}
	cases := []struct {
		name   string
		key    []byte
		wantOK bool
	}{
		{"the same key is accepted", key, true},
		{"another key is refused", bytes.Repeat([]byte("x"), 32), false},
		{"no key is refused", nil, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rx, tx := keyed(), keyed()
			cfg := testCoordConfig(rx.addr, tx.addr)
			cfg.messages = 1000
			cfg.key = tc.key
			report, _, err := coordinate(context.Background(), cfg, &syncBuffer{})
			if tc.wantOK {
				if err != nil {
					t.Fatalf("coordinate: %v", err)
				}
				if report.MessagesDelivered != 1000 || report.Lost != 0 || report.Duplicates != 0 {
					t.Errorf("delivered %d, lost %d, duplicates %d; want 1000 exactly once", report.MessagesDelivered, report.Lost, report.Duplicates)
				}
				return
			}
			if err == nil {
				t.Fatal("coordinate succeeded without proving the key")
			}
			var ae *agentError
			if !errors.As(err, &ae) || !errors.Is(err, control.ErrAuth) {
				t.Errorf("error %v does not name the agent and say authentication failed", err)
			}
			rx.log.waitFor(t, "refused coordinator")
		})
	}
}

// An engine worker is placed only by a coordinator that holds the agent's
// key, and a mismatch is named as one on both sides, whichever side lacks
// the key; nothing runs. A launcher without a key used to fail with
// `unexpected message "auth", want "started"`, and an agent without one
// took the launcher's challenge for a run's first message ("coordinator
// connected", then `run failed: unexpected message "auth"`).
func TestAWorkerIsPlacedOnlyByALauncherThatHoldsTheAgentsKey(t *testing.T) {
	key := bytes.Repeat([]byte("k"), 32)
	cases := []struct {
		name               string
		agentKey, launcher []byte
		wantCoord          string // in the launcher's error, beside control.ErrAuth
		wantAgent          string // in the agent's log
	}{
		{"a launcher without the key of a keyed agent", key, nil, "the agent requires a key", "refused coordinator"},
		{"a launcher with a key for an agent without one", nil, key, "this agent has no --key-file", "has no --key-file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := startAgentWith(t, func(a *agent) { a.key, a.workDir = tc.agentKey, t.TempDir() })
			l := &agentLauncher{agents: []string{a.addr}, key: tc.launcher, job: "job-1", spec: []byte(`{"kind":"pipeline"}`),
				timeout: 5 * time.Second, faults: func(int) (string, uint64) { return "", 0 }, machines: map[string]bench.Machine{}}
			w, err := l.Launch(context.Background(), 0, "")
			if err == nil {
				w.Kill()
				w.Wait()
				t.Fatal("the worker was started")
			}
			if !errors.Is(err, control.ErrAuth) || !strings.Contains(err.Error(), tc.wantCoord) {
				t.Errorf("the launcher's error %q does not say authentication failed and %q", err, tc.wantCoord)
			}
			a.log.waitFor(t, tc.wantAgent)
			if log := a.log.String(); strings.Contains(log, "started worker") || strings.Contains(log, "connected") {
				t.Errorf("the agent ran something:\n%s", log)
			}
		})
	}
}
