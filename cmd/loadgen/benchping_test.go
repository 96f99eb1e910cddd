package main

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport"
)

// pingEcho starts the pinging node, with p's handler on pingTask, and an
// echo node that answers each ping on echoTask with answer(its sequence
// number): ok false drops the ping. It returns the pinging node and the
// echo's address.
func pingEcho(t *testing.T, p *taskPinger, answer func(seq uint64) (uint64, bool)) (*transport.Node, string) {
	t.Helper()
	ctx := context.Background()
	a, err := listeningNode(backendDefault)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Abort)
	if err := a.Handle(pingTask, p.handler(ctx, false)); err != nil {
		t.Fatal(err)
	}
	z, err := listeningNode(backendDefault)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(z.Abort)
	peer, err := z.Peer(a.Addr())
	if err != nil {
		t.Fatal(err)
	}
	back, err := peer.OpenSender(ctx, echoTask, pingTask)
	if err != nil {
		t.Fatal(err)
	}
	if err := z.Handle(echoTask, func(_ taskid.Channel, _ uint64, msgs []transport.Message) {
		for _, m := range msgs {
			ts, seq := bench.Stamped(m.Payload)
			seq, ok := answer(seq)
			if !ok {
				continue
			}
			pong := append([]byte(nil), m.Payload...)
			bench.Stamp(pong, ts, seq)
			if err := back.Send(ctx, m.Ts, pong); err != nil {
				t.Error(err)
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	return a, z.Addr()
}

// The pinger in the pinging task's handler counts every round trip once,
// stops sending after its duration, and says which ping an echo answered
// wrongly or left unanswered.
func TestTaskPinger(t *testing.T) {
	t.Run("echo", func(t *testing.T) {
		p := newTaskPinger(100)
		var echoed atomic.Int64
		a, addr := pingEcho(t, p, func(seq uint64) (uint64, bool) { echoed.Add(1); return seq, true })
		rec := bench.NewRecorder()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		start := time.Now()
		n, err := p.run(ctx, a, addr, 200*time.Millisecond, rec)
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took < 200*time.Millisecond {
			t.Errorf("run returned after %v, before its 200ms", took)
		}
		if n == 0 || n != echoed.Load() || n != rec.Snapshot().TotalCount() {
			t.Errorf("%d round trips, %d pings echoed, %d recorded: want one of each a round trip", n, echoed.Load(), rec.Snapshot().TotalCount())
		}
		// No ping follows the last pong.
		time.Sleep(50 * time.Millisecond)
		if echoed.Load() != n {
			t.Errorf("%d pings echoed after the run's %d round trips", echoed.Load(), n)
		}
		if l := rec.Latency(); l.P50 <= 0 {
			t.Errorf("round trips of %v µs at the median", l.P50)
		}
	})
	t.Run("changed echo", func(t *testing.T) {
		p := newTaskPinger(100)
		a, addr := pingEcho(t, p, func(seq uint64) (uint64, bool) { return seq + 1, true })
		n, err := p.run(context.Background(), a, addr, 10*time.Second, bench.NewRecorder())
		if !errors.Is(err, bench.ErrBadEcho) || !strings.Contains(err.Error(), "pong 1 for ping 0") || n != 0 {
			t.Errorf("run: %d round trips, %v; want 0 and ErrBadEcho for pong 1 of ping 0", n, err)
		}
	})
	t.Run("no echo", func(t *testing.T) {
		p := newTaskPinger(100)
		var pings atomic.Int64
		a, addr := pingEcho(t, p, func(seq uint64) (uint64, bool) { return seq, pings.Add(1) < 3 })
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		defer cancel()
		n, err := p.run(ctx, a, addr, 10*time.Second, bench.NewRecorder())
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "no pong for ping 2") || n != 2 {
			t.Errorf("run: %d round trips, %v; want 2 and no pong for ping 2", n, err)
		}
	})
}
