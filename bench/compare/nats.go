package main

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// natsPeer carries messages by core NATS publish/subscribe through a nats-server embedded
// in this process (loopback, random port, no JetStream), with one publishing and one
// subscribing nats.go connection.
//
// Core NATS has no flow control between publisher and subscriber: a publisher that runs
// ahead fills the server's and the client's pending buffers until messages are dropped as
// a slow consumer. An engine on NATS has to add credit itself, so this peer does what such
// an engine would: the subscriber publishes its count every natsAckEvery messages and the
// publisher keeps at most natsWindow messages unacknowledged. The window is far above the
// bandwidth-delay product on loopback, so it only bites when the subscriber is slower.
type natsPeer struct{ cfg peerConfig }

func init() {
	registerPeer("nats", 20, func(cfg peerConfig) peer { return &natsPeer{cfg: cfg} })
}

func (p *natsPeer) Name() string { return "nats" }

const (
	natsData = "sluice.compare.data"
	natsAck  = "sluice.compare.ack"
	natsPing = "sluice.compare.ping"
	// natsWindowBytes bounds the unacknowledged bytes, with protocol overhead well under
	// the 64 MiB pending limits of the client subscription and of the server's outbound
	// buffer. Smaller windows (16 MiB, 100 000 messages) cost NATS up to a third of its
	// throughput on a 2-core machine; no window at all made it stall and crawl.
	natsWindowBytes = 32 << 20
	natsMaxWindow   = 200_000
)

// natsWindow is how many messages of size bytes may be unacknowledged.
func natsWindow(size int) int64 {
	return int64(max(4, min(natsMaxWindow, natsWindowBytes/max(1, size))))
}

func (p *natsPeer) about() string {
	return "core NATS through an in-process nats-server, one publishing and one subscribing connection, with a credit window (the subscriber publishes its count every eighth of a 200 000-message/32 MiB window) so no message is dropped as a slow consumer; latency is request/reply."
}

// natsSession is an embedded server and two client connections to it.
type natsSession struct {
	srv      *server.Server
	pub, sub *nats.Conn
	asyncErr atomic.Pointer[error] // first asynchronous client error, such as a slow consumer
}

func startNATS() (*natsSession, error) {
	srv, err := server.NewServer(&server.Options{
		Host:   "127.0.0.1",
		Port:   server.RANDOM_PORT,
		NoLog:  true,
		NoSigs: true,
	})
	if err != nil {
		return nil, err
	}
	go srv.Start()
	if !srv.ReadyForConnections(5 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("nats: embedded server did not start")
	}
	s := &natsSession{srv: srv}
	onErr := nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		s.asyncErr.CompareAndSwap(nil, &err)
	})
	if s.pub, err = nats.Connect(srv.ClientURL(), nats.Name("compare-pub"), nats.NoReconnect(), onErr); err != nil {
		s.close()
		return nil, err
	}
	if s.sub, err = nats.Connect(srv.ClientURL(), nats.Name("compare-sub"), nats.NoReconnect(), onErr); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *natsSession) err() error {
	if p := s.asyncErr.Load(); p != nil {
		return *p
	}
	return nil
}

func (s *natsSession) close() {
	if s.pub != nil {
		s.pub.Close()
	}
	if s.sub != nil {
		s.sub.Close()
	}
	s.srv.Shutdown()
	s.srv.WaitForShutdown()
}

func (p *natsPeer) Throughput(ctx context.Context, size int, d time.Duration) (int64, time.Duration, error) {
	s, err := startNATS()
	if err != nil {
		return 0, 0, fmt.Errorf("nats: %w", err)
	}
	defer s.close()

	window := natsWindow(size)
	ackEvery := max(1, window/8)

	// The end of the run is when the subscriber holds as many messages as the publisher
	// sent; whichever side sees that last records the time.
	var (
		received atomic.Int64
		target   atomic.Int64
		once     sync.Once
		end      time.Time
		subErr   error
		finished = make(chan struct{})
	)
	target.Store(-1)
	finish := func(err error) {
		once.Do(func() { end, subErr = time.Now(), err; close(finished) })
	}
	c := &checker{size: size}
	ackBuf := make([]byte, 8)
	_, err = s.sub.Subscribe(natsData, func(m *nats.Msg) {
		if err := c.check(m.Data); err != nil {
			finish(err)
			return
		}
		n := received.Add(1)
		if n%ackEvery == 0 {
			binary.LittleEndian.PutUint64(ackBuf, uint64(n))
			if err := s.sub.Publish(natsAck, ackBuf); err != nil {
				finish(err)
			}
		}
		if n == target.Load() {
			finish(nil)
		}
	})
	if err != nil {
		return 0, 0, fmt.Errorf("nats: subscribe: %w", err)
	}
	if err := s.sub.Flush(); err != nil { // the subscription is live before the first publish
		return 0, 0, fmt.Errorf("nats: %w", err)
	}

	var acked atomic.Int64
	credit := make(chan struct{}, 1)
	_, err = s.pub.Subscribe(natsAck, func(m *nats.Msg) {
		if len(m.Data) == 8 {
			acked.Store(int64(binary.LittleEndian.Uint64(m.Data)))
			select {
			case credit <- struct{}{}:
			default:
			}
		}
	})
	if err != nil {
		return 0, 0, fmt.Errorf("nats: subscribe: %w", err)
	}
	if err := s.pub.Flush(); err != nil {
		return 0, 0, fmt.Errorf("nats: %w", err)
	}

	payload := make([]byte, size)
	st := newStopper(ctx, d, p.cfg.maxMsgs)
	defer st.release()
	var sent int64
	var perr error
	start := time.Now()
publish:
	for !st.done(sent) {
		for sent-acked.Load() >= window {
			select {
			case <-credit:
			case <-finished:
				break publish
			case <-ctx.Done():
				return 0, 0, ctx.Err()
			}
		}
		stamp(payload, uint64(sent))
		if perr = s.pub.Publish(natsData, payload); perr != nil {
			break
		}
		sent++
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, err // a cancelled run is not a measurement
	}
	if perr == nil {
		perr = s.pub.Flush()
	}
	if perr != nil {
		return 0, 0, fmt.Errorf("nats: publish: %w", perr)
	}
	target.Store(sent)
	if received.Load() == sent {
		finish(nil)
	}
	// The subscriber may stall for good (a dropped slow consumer); poll for that.
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case <-finished:
			waiting = false
		case <-tick.C:
			if err := s.err(); err != nil {
				return 0, 0, fmt.Errorf("nats: %w", err)
			}
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		}
	}
	if subErr != nil {
		return 0, 0, fmt.Errorf("nats: receive: %w", subErr)
	}
	if err := s.err(); err != nil {
		return 0, 0, fmt.Errorf("nats: %w", err)
	}
	if err := sameCount("nats", sent, received.Load()); err != nil {
		return 0, 0, err
	}
	return sent, end.Sub(start), nil
}

// Latency is request/reply: the subscribing connection answers each request with its data.
func (p *natsPeer) Latency(ctx context.Context, size, n int) (hist, error) {
	s, err := startNATS()
	if err != nil {
		return hist{}, fmt.Errorf("nats: %w", err)
	}
	defer s.close()
	_, err = s.sub.Subscribe(natsPing, func(m *nats.Msg) {
		if err := m.Respond(m.Data); err != nil {
			s.asyncErr.CompareAndSwap(nil, &err)
		}
	})
	if err != nil {
		return hist{}, fmt.Errorf("nats: subscribe: %w", err)
	}
	if err := s.sub.Flush(); err != nil {
		return hist{}, fmt.Errorf("nats: %w", err)
	}
	h := newHist()
	ping := make([]byte, size)
	for i := range n {
		stamp(ping, uint64(i))
		t0 := time.Now()
		pong, err := s.pub.RequestWithContext(ctx, natsPing, ping)
		if err != nil {
			return hist{}, fmt.Errorf("nats: request: %w", errors.Join(err, s.err()))
		}
		h.record(time.Since(t0))
		if string(pong.Data) != string(ping) {
			return hist{}, fmt.Errorf("nats: %w", errBadEcho)
		}
	}
	return h, nil
}
