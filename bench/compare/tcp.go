package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// tcpPeer is the ceiling: plain loopback TCP with ideal batching. The writer fills 64 KiB
// buffers with length-prefixed messages and writes each with one call; the reader reads
// 64 KiB at a time and parses and checks every message. There is no protocol, no
// acknowledgement and no per-message system call, so nothing carrying the same messages
// over one TCP connection should be faster.
type tcpPeer struct{ cfg peerConfig }

func init() {
	registerPeer("tcp", 0, func(cfg peerConfig) peer { return &tcpPeer{cfg: cfg} })
}

func (p *tcpPeer) Name() string { return "tcp" }

func (p *tcpPeer) about() string {
	return "plain TCP; the writer fills 64 KiB buffers of length-prefixed messages, the reader reads 64 KiB at a time and checks every message. The ceiling."
}

// tcpPair returns both ends of a fresh loopback connection; closing them is the caller's.
// The connections are closed when ctx ends so that blocked reads and writes return.
func tcpPair(ctx context.Context) (client, server *net.TCPConn, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, nil, err
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	acceptErr := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			acceptErr <- err
			return
		}
		accepted <- c
	}()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		return nil, nil, nil, err
	}
	select {
	case s := <-accepted:
		client, server = c.(*net.TCPConn), s.(*net.TCPConn)
	case err := <-acceptErr:
		c.Close()
		return nil, nil, nil, err
	}
	unhook := context.AfterFunc(ctx, func() { client.Close(); server.Close() })
	stop = func() {
		unhook()
		client.Close()
		server.Close()
	}
	return client, server, stop, nil
}

func (p *tcpPeer) Throughput(ctx context.Context, size int, d time.Duration) (int64, time.Duration, error) {
	client, server, stop, err := tcpPair(ctx)
	if err != nil {
		return 0, 0, fmt.Errorf("tcp: %w", err)
	}
	defer stop()

	type result struct {
		msgs int64
		end  time.Time
		err  error
	}
	done := make(chan result, 1)
	go func() {
		n, err := readPacked(server, size)
		end := time.Now()
		if err != nil {
			server.Close() // unblocks the writer
		}
		done <- result{n, end, err}
	}()

	payload := make([]byte, size)
	buf := make([]byte, 0, frameSize)
	st := newStopper(ctx, d, p.cfg.maxMsgs)
	defer st.release()
	var sent int64
	var werr error
	start := time.Now()
	for !st.done(sent) {
		buf = buf[:0]
		for fits(len(buf), size) && !st.full(sent) {
			buf = appendMsg(buf, payload, uint64(sent))
			sent++
		}
		if _, werr = client.Write(buf); werr != nil {
			break
		}
	}
	if werr == nil {
		werr = client.CloseWrite() // the reader's EOF marks the end of the stream
	}
	r := <-done
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	if werr != nil {
		return 0, 0, fmt.Errorf("tcp: write: %w", werr)
	}
	if r.err != nil {
		return 0, 0, fmt.Errorf("tcp: read: %w", r.err)
	}
	if err := sameCount("tcp", sent, r.msgs); err != nil {
		return 0, 0, err
	}
	return r.msgs, r.end.Sub(start), nil
}

// readPacked reads length-prefixed messages of size bytes from r until EOF, 64 KiB (or one
// message, if larger) at a time, checks each, and returns how many it read.
func readPacked(r io.Reader, size int) (int64, error) {
	buf := make([]byte, max(frameSize, 4+size))
	c := &checker{size: size}
	var total int64
	have := 0
	for {
		n, rerr := r.Read(buf[have:])
		have += n
		msgs, used, err := parseMsgs(buf[:have], c)
		total += msgs
		if err != nil {
			return total, err
		}
		have = copy(buf, buf[used:have])
		if rerr == io.EOF {
			if have != 0 {
				return total, errTruncated
			}
			return total, nil
		}
		if rerr != nil {
			return total, rerr
		}
	}
}

func (p *tcpPeer) Latency(ctx context.Context, size, n int) (hist, error) {
	client, server, stop, err := tcpPair(ctx)
	if err != nil {
		return hist{}, fmt.Errorf("tcp: %w", err)
	}
	defer stop()

	echoed := make(chan error, 1)
	go func() {
		defer server.Close() // unblocks the pinger if the echo fails
		buf := make([]byte, 4+size)
		for {
			if _, err := io.ReadFull(server, buf); err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				echoed <- err
				return
			}
			if _, err := server.Write(buf); err != nil {
				echoed <- err
				return
			}
		}
	}()

	h := newHist()
	payload := make([]byte, size)
	ping := make([]byte, 0, 4+size)
	pong := make([]byte, 4+size)
	for i := range n {
		ping = appendMsg(ping[:0], payload, uint64(i))
		t0 := time.Now()
		if _, err := client.Write(ping); err != nil {
			return hist{}, fmt.Errorf("tcp: ping: %w", errors.Join(ctx.Err(), err))
		}
		if _, err := io.ReadFull(client, pong); err != nil {
			return hist{}, fmt.Errorf("tcp: pong: %w", errors.Join(ctx.Err(), err))
		}
		h.record(time.Since(t0))
		if string(pong) != string(ping) {
			return hist{}, fmt.Errorf("tcp: %w", errBadEcho)
		}
	}
	client.CloseWrite()
	if err := <-echoed; err != nil {
		return hist{}, fmt.Errorf("tcp: echo: %w", err)
	}
	return h, nil
}
