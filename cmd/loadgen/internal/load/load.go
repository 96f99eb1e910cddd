// Package load is the load loadgen puts on a transport: payloads that carry
// their intended send time and their channel's sequence number, the
// strategies that send them over a set of transport.Senders, and the
// Limiter that holds receiving tasks to a consumption rate.
//
// Message i of a run goes on sender i mod len(senders) (the producers of
// MaxRate and of Count at no rate visit their senders in turn instead,
// sending runs of up to 64 to each that has credit). Its payload starts with
// bench.Stamp's header: the intended send time, in bench.Now nanoseconds
// plus Config.Shift when set (the receiver's clock offset, so that a
// receiver on another host reads its latency as its own Now minus the
// stamp), and the message's sequence number on its sender, counted from 0
// without gaps (a failed send does not use one up). Filler follows, up to
// Config.Size. A receiver checks order and loss by sequence number and
// records latency from the intended time.
//
// The strategies:
//   - MaxRate: as fast as the senders take messages, for Config.Duration.
//   - FixedRate: at Config.Rate, message i intended at start+i/rate without
//     coordinated omission (bench.FixedRate), for Config.Duration.
//   - Count: exactly n messages, at Config.Rate or as fast as they go (as
//     MaxRate sends them).
//   - Each: one Send per message on one sender, as fast as it goes.
//
// Each call of a strategy owns its senders until it returns; none is safe
// to run twice at once on the same senders.
package load

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/transport"
)

// Config is what the strategies send.
type Config struct {
	// Size is the payload size in bytes, at least bench.StampLen.
	Size int
	// Duration is how long MaxRate and Each send, and the span of
	// FixedRate's schedule. Count ignores it.
	Duration time.Duration
	// Rate is FixedRate's and Count's messages per second over all
	// senders; Count with 0 sends as fast as the senders take them.
	Rate float64
	// Producers is how many goroutines MaxRate and Count at no rate send
	// from, each to its share of the senders; at most one per sender, at
	// least one.
	Producers int
	// Shift, if set, is added to every stamped send time.
	Shift *atomic.Int64
	// Sent, if set, is where Count keeps how many it has sent so far, for a
	// progress display.
	Sent *atomic.Int64
}

// ErrConfig means a Config or a sender list a strategy cannot send with.
var ErrConfig = errors.New("load: bad configuration")

func (c *Config) check(senders int) error {
	switch {
	case c.Size < bench.StampLen:
		return fmt.Errorf("%w: payload size %d is below %d, the bytes of the send time and sequence number", ErrConfig, c.Size, bench.StampLen)
	case senders == 0:
		return fmt.Errorf("%w: no senders", ErrConfig)
	}
	return nil
}

// Payload returns a new payload of size bytes: a zero header of
// bench.StampLen bytes, then loadgen's filler. size must be at least
// bench.StampLen.
func Payload(size int) []byte {
	b := make([]byte, size)
	for i := bench.StampLen; i < size; i++ {
		b[i] = byte('a' + i%26)
	}
	return b
}

// payloads builds the payloads of one run: per sender, the next sequence
// number. It is not safe for concurrent use.
type payloads struct {
	buf   []byte // the payload next returns; valid until the next call
	seqs  []uint64
	shift *atomic.Int64
}

func newPayloads(size, channels int, shift *atomic.Int64) *payloads {
	return &payloads{buf: Payload(size), seqs: make([]uint64, channels), shift: shift}
}

// sendTime is intended in the receiver's clock.
func (p *payloads) sendTime(intended int64) int64 {
	if p.shift != nil {
		intended += p.shift.Load()
	}
	return intended
}

// next returns channel ch's next payload, intended to be sent at
// intended. It stays valid until the next call; the channel's sequence
// number moves on only with sent.
func (p *payloads) next(ch int, intended int64) []byte {
	bench.Stamp(p.buf, p.sendTime(intended), p.seqs[ch])
	return p.buf
}

// sent records that n more messages of channel ch went out.
func (p *payloads) sent(ch, n int) { p.seqs[ch] += uint64(n) }

// send sends channel ch's next payload on s.
func (p *payloads) send(ctx context.Context, s *transport.Sender, ch int, intended int64) error {
	if err := s.Send(ctx, intended, p.next(ch, intended)); err != nil {
		return err
	}
	p.sent(ch, 1)
	return nil
}

// newRun returns n messages with payload buffers of their own, for stamp.
func (p *payloads) newRun(n int) []transport.Message {
	run := make([]transport.Message, n)
	for i := range run {
		run[i].Payload = Payload(len(p.buf))
	}
	return run
}

// stamp makes run the next len(run) messages of channel ch, intended to be
// sent at intended; sent must follow for those that went out.
func (p *payloads) stamp(run []transport.Message, ch int, intended int64) {
	for i := range run {
		run[i].Ts = intended
		bench.Stamp(run[i].Payload, p.sendTime(intended), p.seqs[ch]+uint64(i))
	}
}

// roundRobin is the target of bench's drivers that sends message i on
// sender i mod len(senders), counting into sent when it is set.
func (p *payloads) roundRobin(senders []*transport.Sender, sent *atomic.Int64) bench.Target {
	return func(ctx context.Context, i, intended int64) error {
		ch := int(i % int64(len(senders)))
		if err := p.send(ctx, senders[ch], ch, intended); err != nil {
			return err
		}
		if sent != nil {
			sent.Store(i + 1)
		}
		return nil
	}
}
