package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
)

// grpcPeer carries messages on one bidirectional gRPC stream over loopback, with gRPC's
// default settings (HTTP/2 flow control windows, buffer sizes, no compression).
//
// Unpacked ("grpc") is how a user writes it: one message per Send. Packed ("grpc-packed")
// sends 64 KiB frames of length-prefixed messages per Send, which is the best an engine
// can get from gRPC by batching itself.
//
// Messages are raw bytes under a codec registered by name, so there is no protoc step. The
// codec's Marshal copies the message, as proto.Marshal would allocate one, because gRPC
// writes the encoded bytes after Send returns and the sender reuses its buffer.
type grpcPeer struct {
	cfg    peerConfig
	packed bool
}

func init() {
	encoding.RegisterCodec(rawCodec{})
	registerPeer("grpc", 10, func(cfg peerConfig) peer { return &grpcPeer{cfg: cfg} })
	registerPeer("grpc-packed", 11, func(cfg peerConfig) peer { return &grpcPeer{cfg: cfg, packed: true} })
}

func (p *grpcPeer) Name() string {
	if p.packed {
		return "grpc-packed"
	}
	return "grpc"
}

func (p *grpcPeer) about() string {
	if p.packed {
		return "one bidirectional gRPC stream, 64 KiB frames of length-prefixed messages per Send, raw-bytes codec, default settings; latency sends one message per Send."
	}
	return "one bidirectional gRPC stream, one message per Send, raw-bytes codec (Marshal copies, as proto.Marshal allocates), default settings."
}

// rawCodecName is the content subtype both ends use ("application/grpc+sluice-raw").
const rawCodecName = "sluice-raw"

var errNotBytes = errors.New("compare: raw codec carries only *[]byte")

// rawCodec passes *[]byte messages through as they are. Safe for concurrent use.
type rawCodec struct{}

func (rawCodec) Name() string { return rawCodecName }

// Marshal returns a copy of *v: gRPC may still hold the result after Send returns.
func (rawCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(*[]byte)
	if !ok {
		return nil, fmt.Errorf("%w, got %T", errNotBytes, v)
	}
	return append([]byte(nil), *m...), nil
}

// Unmarshal keeps data: gRPC hands a v1 codec a buffer of its own (mem.BufferSlice.Materialize).
func (rawCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(*[]byte)
	if !ok {
		return fmt.Errorf("%w, got %T", errNotBytes, v)
	}
	*m = data
	return nil
}

// pipeHandler is the service's handler type, as protoc would generate it.
type pipeHandler interface {
	pipe(grpc.ServerStream) error
}

const pipeMethod = "/sluice.compare.Pipe/Pipe"

var pipeDesc = grpc.ServiceDesc{
	ServiceName: "sluice.compare.Pipe",
	HandlerType: (*pipeHandler)(nil),
	Streams: []grpc.StreamDesc{{
		StreamName:    "Pipe",
		Handler:       func(srv any, ss grpc.ServerStream) error { return srv.(pipeHandler).pipe(ss) },
		ServerStreams: true,
		ClientStreams: true,
	}},
}

var pipeStreamDesc = &grpc.StreamDesc{StreamName: "Pipe", ServerStreams: true, ClientStreams: true}

// pipeServer answers the one stream of a run: it either counts (and checks) what arrives
// and reports once, or echoes every message back.
type pipeServer struct {
	size   int
	packed bool
	echo   bool
	done   chan pipeResult // gets one result per stream
}

type pipeResult struct {
	msgs int64
	end  time.Time
	err  error
}

func (s *pipeServer) pipe(ss grpc.ServerStream) error {
	if s.echo {
		var m []byte
		for {
			if err := ss.RecvMsg(&m); err != nil {
				if errors.Is(err, io.EOF) {
					return nil
				}
				return err
			}
			if err := ss.SendMsg(&m); err != nil {
				return err
			}
		}
	}
	c := &checker{size: s.size}
	var msgs int64
	var m []byte
	for {
		err := ss.RecvMsg(&m)
		if errors.Is(err, io.EOF) {
			s.done <- pipeResult{msgs: msgs, end: time.Now()}
			return nil
		}
		if err == nil {
			if s.packed {
				var n int64
				var used int
				n, used, err = parseMsgs(m, c)
				msgs += n
				if err == nil && used != len(m) {
					err = errTruncated
				}
			} else {
				err = c.check(m)
				msgs++
			}
		}
		if err != nil {
			s.done <- pipeResult{msgs: msgs, end: time.Now(), err: err}
			return err
		}
	}
}

// grpcSession is a server and a client connected to it over loopback.
type grpcSession struct {
	srv    *grpc.Server
	conn   *grpc.ClientConn
	served chan error
}

func startGRPC(h *pipeServer) (*grpcSession, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	srv := grpc.NewServer()
	srv.RegisterService(&pipeDesc, h)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	conn, err := grpc.NewClient("passthrough:///"+ln.Addr().String(),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.CallContentSubtype(rawCodecName)))
	if err != nil {
		srv.Stop()
		<-served
		return nil, err
	}
	return &grpcSession{srv: srv, conn: conn, served: served}, nil
}

func (s *grpcSession) close() {
	s.conn.Close()
	s.srv.Stop()
	<-s.served
}

func (p *grpcPeer) Throughput(ctx context.Context, size int, d time.Duration) (int64, time.Duration, error) {
	h := &pipeServer{size: size, packed: p.packed, done: make(chan pipeResult, 1)}
	sess, err := startGRPC(h)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", p.Name(), err)
	}
	defer sess.close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := sess.conn.NewStream(sctx, pipeStreamDesc, pipeMethod)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", p.Name(), err)
	}

	payload := make([]byte, size)
	st := newStopper(ctx, d, p.cfg.maxMsgs)
	defer st.release()
	var sent int64
	var serr error
	start := time.Now()
	if p.packed {
		buf := make([]byte, 0, frameSize)
		for !st.done(sent) && serr == nil {
			buf = buf[:0]
			for fits(len(buf), size) && !st.full(sent) {
				buf = appendMsg(buf, payload, uint64(sent))
				sent++
			}
			serr = stream.SendMsg(&buf)
		}
	} else {
		for !st.done(sent) && serr == nil {
			stamp(payload, uint64(sent))
			serr = stream.SendMsg(&payload)
			sent++
		}
	}
	if err := ctx.Err(); err != nil {
		return 0, 0, err // a cancelled run is not a measurement
	}
	if serr == nil {
		serr = stream.CloseSend()
	}
	var r pipeResult
	select {
	case r = <-h.done:
	case <-ctx.Done():
		return 0, 0, ctx.Err()
	}
	if r.err != nil {
		return 0, 0, fmt.Errorf("%s: receive: %w", p.Name(), r.err)
	}
	if serr != nil {
		return 0, 0, fmt.Errorf("%s: send: %w", p.Name(), serr)
	}
	if err := stream.RecvMsg(new([]byte)); !errors.Is(err, io.EOF) {
		return 0, 0, fmt.Errorf("%s: stream end: %w", p.Name(), err)
	}
	if err := sameCount(p.Name(), sent, r.msgs); err != nil {
		return 0, 0, err
	}
	return r.msgs, r.end.Sub(start), nil
}

// Latency sends one message per Send in both variants: packing has nothing to pack when
// only one message is in flight.
func (p *grpcPeer) Latency(ctx context.Context, size, n int) (hist, error) {
	sess, err := startGRPC(&pipeServer{echo: true})
	if err != nil {
		return hist{}, fmt.Errorf("%s: %w", p.Name(), err)
	}
	defer sess.close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stream, err := sess.conn.NewStream(sctx, pipeStreamDesc, pipeMethod)
	if err != nil {
		return hist{}, fmt.Errorf("%s: %w", p.Name(), err)
	}
	h := newHist()
	ping := make([]byte, size)
	var pong []byte
	for i := range n {
		stamp(ping, uint64(i))
		t0 := time.Now()
		if err := stream.SendMsg(&ping); err != nil {
			return hist{}, fmt.Errorf("%s: ping: %w", p.Name(), err)
		}
		if err := stream.RecvMsg(&pong); err != nil {
			return hist{}, fmt.Errorf("%s: pong: %w", p.Name(), err)
		}
		h.record(time.Since(t0))
		if string(pong) != string(ping) {
			return hist{}, fmt.Errorf("%s: %w", p.Name(), errBadEcho)
		}
	}
	if err := stream.CloseSend(); err != nil {
		return hist{}, fmt.Errorf("%s: %w", p.Name(), err)
	}
	if err := stream.RecvMsg(&pong); !errors.Is(err, io.EOF) {
		return hist{}, fmt.Errorf("%s: stream end: %w", p.Name(), err)
	}
	return h, nil
}
