package main

import (
	"bytes"
	"context"
	"errors"
	"testing"

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
			if !errors.As(err, &ae) || !errors.Is(err, errCtlAuth) {
				t.Errorf("error %v does not name the agent and say authentication failed", err)
			}
			rx.log.waitFor(t, "refused coordinator")
		})
	}
}

func TestControlProofsAreBoundToRoleAndNonces(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	a, b := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	p := ctlProof(key, 'c', a, b)
	for name, q := range map[string][]byte{
		"the other role":     ctlProof(key, 'a', a, b),
		"swapped nonces":     ctlProof(key, 'c', b, a),
		"another key":        ctlProof([]byte("another key, 32 bytes long......"), 'c', a, b),
		"another peer nonce": ctlProof(key, 'c', a, bytes.Repeat([]byte{3}, 32)),
		"another own nonce":  ctlProof(key, 'c', bytes.Repeat([]byte{3}, 32), b),
	} {
		if bytes.Equal(p, q) {
			t.Errorf("a proof with %s equals the original", name)
		}
	}
}
