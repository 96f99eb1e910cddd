package wire

import (
	"bytes"
	"errors"
	"fmt"
	"io"
)

// Test-only value types, so that one table can hold every kind of frame and a
// single pair of functions can encode and parse any of them.
type (
	ping struct {
		V     uint64
		Flags uint8
	}
	run struct {
		H    RunHeader
		Msgs []Message
	}
	batch struct {
		Flags uint8
		Runs  []run
	}
)

// appendValue appends the whole frame that encodes v.
func appendValue(dst []byte, v any) []byte {
	switch v := v.(type) {
	case Open:
		return AppendOpen(dst, v)
	case Close:
		return AppendClose(dst, v)
	case AckRequest:
		return AppendAckRequest(dst, v)
	case Ack:
		return AppendAck(dst, v)
	case ping:
		return AppendPing(dst, v.V, v.Flags)
	case Pong:
		return AppendPong(dst, v)
	case GoAway:
		return AppendGoAway(dst, v)
	case Auth:
		return AppendAuth(dst, v)
	case batch:
		dst, start := BeginFrame(dst, FrameData, v.Flags)
		for _, r := range v.Runs {
			dst = appendRun(dst, r)
		}
		return FinishFrame(dst, start)
	}
	panic(fmt.Sprintf("appendValue: %T", v))
}

func appendRun(dst []byte, r run) []byte {
	h := r.H
	h.Count = len(r.Msgs)
	dst = AppendRunHeader(dst, h)
	prev := h.BaseTs
	for _, m := range r.Msgs {
		dst = AppendMessage(dst, prev, m.Ts, m.Payload)
		prev = m.Ts
	}
	return dst
}

// parseFrame parses the body of f into the value type appendValue takes.
func parseFrame(f Frame) (any, error) {
	switch f.Type {
	case FrameOpen:
		return ParseOpen(f.Body)
	case FrameClose:
		return ParseClose(f.Body)
	case FrameAckRequest:
		return ParseAckRequest(f.Body)
	case FrameAck:
		return ParseAck(f.Body)
	case FramePing:
		v, err := ParsePing(f.Body)
		return ping{v, f.Flags}, err
	case FramePong:
		return ParsePong(f.Flags, f.Body)
	case FrameGoAway:
		return ParseGoAway(f.Body)
	case FrameAuth:
		return ParseAuth(f.Body)
	case FrameData:
		runs, err := readRuns(f.Body)
		return batch{Flags: f.Flags, Runs: runs}, err
	}
	return nil, fmt.Errorf("parseFrame: %v", f.Type)
}

// readRuns walks body with NextRun/NextMessage.
func readRuns(body []byte) ([]run, error) {
	var r DataReader
	r.Reset(body)
	var runs []run
	for {
		h, err := r.NextRun()
		if err == io.EOF {
			return runs, nil
		}
		if err != nil {
			return runs, err
		}
		cur := run{H: h}
		for {
			m, err := r.NextMessage()
			if err == io.EOF {
				break
			}
			if err != nil {
				return runs, err
			}
			cur.Msgs = append(cur.Msgs, m)
		}
		if len(cur.Msgs) != h.Count {
			return runs, fmt.Errorf("run of count %d yielded %d messages", h.Count, len(cur.Msgs))
		}
		runs = append(runs, cur)
	}
}

// readRunsWhole walks body with ReadRun, copying each run out.
func readRunsWhole(body []byte) ([]run, error) {
	var r DataReader
	r.Reset(body)
	var runs []run
	var buf []Message
	for {
		msgs, h, err := r.ReadRun(buf)
		if err == io.EOF {
			return runs, nil
		}
		if err != nil {
			return runs, err
		}
		runs = append(runs, run{H: h, Msgs: append([]Message(nil), msgs...)})
		buf = msgs
	}
}

// sameRuns compares runs by value, treating nil and empty payloads alike.
func sameRuns(a, b []run) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d runs, want %d", len(a), len(b))
	}
	for i := range a {
		ha, hb := a[i].H, b[i].H
		if ha.Channel != hb.Channel || ha.FirstSeq != hb.FirstSeq || ha.BaseTs != hb.BaseTs {
			return fmt.Errorf("run %d header %+v, want %+v", i, ha, hb)
		}
		if len(a[i].Msgs) != len(b[i].Msgs) {
			return fmt.Errorf("run %d has %d messages, want %d", i, len(a[i].Msgs), len(b[i].Msgs))
		}
		for j := range a[i].Msgs {
			ma, mb := a[i].Msgs[j], b[i].Msgs[j]
			if ma.Ts != mb.Ts || !bytes.Equal(ma.Payload, mb.Payload) {
				return fmt.Errorf("run %d message %d = {%d %q}, want {%d %q}", i, j, ma.Ts, ma.Payload, mb.Ts, mb.Payload)
			}
		}
	}
	return nil
}

// sameValue compares two decoded values of any frame type.
func sameValue(got, want any) error {
	if gb, ok := got.(batch); ok {
		wb, ok := want.(batch)
		if !ok {
			return fmt.Errorf("got a batch, want %T", want)
		}
		if gb.Flags != wb.Flags {
			return fmt.Errorf("flags %#x, want %#x", gb.Flags, wb.Flags)
		}
		return sameRuns(gb.Runs, wb.Runs)
	}
	if got != want {
		return fmt.Errorf("got %#v, want %#v", got, want)
	}
	return nil
}

// isSentinel reports which of the package's sentinels err matches.
func sentinelOf(err error) error {
	for _, s := range []error{ErrNeedMore, ErrBadMagic, ErrVersion, ErrReserved, ErrUnknownFrame,
		ErrFrameTooLarge, ErrVarint, ErrChecksum, ErrOverrun, ErrTrailing} {
		if errors.Is(err, s) {
			return s
		}
	}
	return nil
}
