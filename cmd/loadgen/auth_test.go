package main

import (
	"bytes"
	"context"
	"errors"
	"testing"

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
