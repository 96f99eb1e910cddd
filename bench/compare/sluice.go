package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport"
)

// sluicePeer is the library under test: two transport nodes over loopback,
// one channel, messages sent one Send call each as an engine would, the
// transport batching them. Throughput ends when the target task has
// consumed and acknowledged the last message.
type sluicePeer struct{ cfg peerConfig }

func init() {
	registerPeer("sluice", 30, func(cfg peerConfig) peer { return &sluicePeer{cfg: cfg} })
}

func (p *sluicePeer) Name() string { return "sluice" }

func (p *sluicePeer) about() string {
	return "Sluice's transport with default options: one Send per message on one channel, flow control and loss detection on; done when the target task has consumed and acknowledged everything."
}

var (
	sluiceSource = taskid.ID{Processor: 0}
	sluiceTarget = taskid.ID{Processor: 1}
)

// sluicePair starts a receiving and a sending node and opens the channel.
func sluicePair(ctx context.Context) (rx, tx *transport.Node, s *transport.Sender, err error) {
	rx, err = transport.NewNode(transport.WithListen("127.0.0.1:0"))
	if err != nil {
		return nil, nil, nil, err
	}
	tx, err = transport.NewNode()
	if err != nil {
		rx.Abort()
		return nil, nil, nil, err
	}
	p, err := tx.Peer(rx.Addr())
	if err == nil {
		err = p.WaitConnected(ctx)
	}
	if err == nil {
		s, err = p.OpenSender(ctx, sluiceSource, sluiceTarget)
	}
	if err != nil {
		tx.Abort()
		rx.Abort()
		return nil, nil, nil, err
	}
	return rx, tx, s, nil
}

func (p *sluicePeer) Throughput(ctx context.Context, size int, d time.Duration) (int64, time.Duration, error) {
	rx, tx, s, err := sluicePair(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("sluice: %w", err)
	}
	defer rx.Abort()
	defer tx.Abort()
	c := &checker{size: size}
	var mu sync.Mutex
	var got int64
	var cerr error
	var last time.Time
	// The receiving task only checks and counts, and never blocks, so it runs
	// inline on the connection's loop, as the other peers' readers check
	// what they read on their reading goroutine.
	if err := rx.HandleInline(sluiceTarget, func(_ taskid.Channel, _ uint64, msgs []transport.Message) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			if cerr == nil {
				cerr = c.check(m.Payload)
			}
		}
		got += int64(len(msgs))
		last = time.Now()
	}); err != nil {
		return 0, 0, fmt.Errorf("sluice: %w", err)
	}
	payload := make([]byte, size)
	st := newStopper(ctx, d, p.cfg.maxMsgs)
	defer st.release()
	var sent int64
	start := time.Now()
	for !st.done(sent) {
		stamp(payload, uint64(sent))
		if err := s.Send(ctx, 0, payload); err != nil {
			return 0, 0, fmt.Errorf("sluice: send: %w", err)
		}
		sent++
	}
	if err := s.Flush(ctx); err != nil {
		return 0, 0, fmt.Errorf("sluice: waiting for the acknowledgements: %w", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if cerr != nil {
		return 0, 0, fmt.Errorf("sluice: %w", cerr)
	}
	if err := sameCount("sluice", sent, got); err != nil {
		return 0, 0, err
	}
	return got, last.Sub(start), nil
}

func (p *sluicePeer) Latency(ctx context.Context, size, n int) (hist, error) {
	// A second pair of nodes carries the echo back, each way a channel of
	// its own, as two tasks talking would.
	a, err := transport.NewNode(transport.WithListen("127.0.0.1:0"))
	if err != nil {
		return hist{}, fmt.Errorf("sluice: %w", err)
	}
	defer a.Abort()
	z, err := transport.NewNode(transport.WithListen("127.0.0.1:0"))
	if err != nil {
		return hist{}, fmt.Errorf("sluice: %w", err)
	}
	defer z.Abort()
	pz, err := a.Peer(z.Addr())
	if err != nil {
		return hist{}, err
	}
	pa, err := z.Peer(a.Addr())
	if err != nil {
		return hist{}, err
	}
	there, err := pz.OpenSender(ctx, sluiceSource, sluiceTarget)
	if err != nil {
		return hist{}, fmt.Errorf("sluice: %w", err)
	}
	back, err := pa.OpenSender(ctx, sluiceTarget, sluiceSource)
	if err != nil {
		return hist{}, fmt.Errorf("sluice: %w", err)
	}
	if err := z.Handle(sluiceTarget, func(_ taskid.Channel, _ uint64, msgs []transport.Message) {
		for _, m := range msgs {
			_ = back.Send(ctx, 0, m.Payload)
		}
	}); err != nil {
		return hist{}, err
	}
	pong := make(chan []byte, 1)
	if err := a.Handle(sluiceSource, func(_ taskid.Channel, _ uint64, msgs []transport.Message) {
		for _, m := range msgs {
			pong <- append([]byte(nil), m.Payload...)
		}
	}); err != nil {
		return hist{}, err
	}
	h := newHist()
	ping := make([]byte, size)
	for i := range n {
		stamp(ping, uint64(i))
		t0 := time.Now()
		if err := there.Send(ctx, 0, ping); err != nil {
			return hist{}, fmt.Errorf("sluice: send: %w", err)
		}
		select {
		case echo := <-pong:
			h.record(time.Since(t0))
			if string(echo) != string(ping) {
				return hist{}, fmt.Errorf("sluice: %w", errBadEcho)
			}
		case <-ctx.Done():
			return hist{}, ctx.Err()
		}
	}
	return h, nil
}
