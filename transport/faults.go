package transport

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/sluicehq/sluice/wire"
)

// Faults describes the faults a node injects into its own outgoing traffic,
// like Aeron's loss generators: seeded, so a failing run can be repeated.
// The zero value injects nothing.
//
// Only DATA frames and the frames of flow control and liveness (ACKREQUEST,
// ACK, PING, PONG) are dropped or duplicated. OPEN, CLOSE and GOAWAY carry
// connection state that TCP never loses on its own; their loss is modelled
// by Reset, which breaks the whole connection.
type Faults struct {
	Drop     float64       // probability that a DATA frame is dropped
	CtrlDrop float64       // probability that an ACKREQUEST, ACK, PING or PONG is dropped
	Dup      float64       // probability that a DATA or control frame is sent twice
	Reset    time.Duration // break one connection abruptly every Reset (0: never)
	Seed     uint64        // seed of the fault generator
}

// Enabled reports whether any fault is configured.
func (f Faults) Enabled() bool {
	return f.Drop > 0 || f.CtrlDrop > 0 || f.Dup > 0 || f.Reset > 0
}

func (f Faults) validate() error {
	for _, p := range []struct {
		name string
		v    float64
	}{{"drop", f.Drop}, {"ctrldrop", f.CtrlDrop}, {"dup", f.Dup}} {
		if p.v < 0 || p.v >= 1 {
			return fmt.Errorf("transport: fault %s=%v must be a probability in [0, 1)", p.name, p.v)
		}
	}
	if f.Reset < 0 {
		return fmt.Errorf("transport: fault reset=%v must not be negative", f.Reset)
	}
	return nil
}

// ParseFaults reads faults written as "drop=0.05,ctrldrop=0.05,dup=0.01,reset=2s".
// Keys it does not know are returned in rest, in order, for layers above the
// transport (the engine's crash= and kill=).
func ParseFaults(s string, seed uint64) (f Faults, rest []string, err error) {
	f.Seed = seed
	if strings.TrimSpace(s) == "" {
		return f, nil, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return f, nil, fmt.Errorf("transport: fault %q is not key=value", kv)
		}
		switch k {
		case "drop", "ctrldrop", "dup":
			p, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return f, nil, fmt.Errorf("transport: fault %s: %w", k, err)
			}
			switch k {
			case "drop":
				f.Drop = p
			case "ctrldrop":
				f.CtrlDrop = p
			default:
				f.Dup = p
			}
		case "reset":
			d, err := time.ParseDuration(v)
			if err != nil {
				return f, nil, fmt.Errorf("transport: fault reset: %w", err)
			}
			f.Reset = d
		default:
			rest = append(rest, kv)
		}
	}
	return f, rest, f.validate()
}

// FaultStats counts the faults a node injected.
type FaultStats struct {
	DataDropped uint64 `json:"drop"`
	CtrlDropped uint64 `json:"ctrldrop"`
	Duplicated  uint64 `json:"dup"`
	Resets      uint64 `json:"reset"`
}

type faultCounters struct {
	dataDropped, ctrlDropped, duplicated, resets atomic.Uint64
}

func (c *faultCounters) snapshot() FaultStats {
	return FaultStats{
		DataDropped: c.dataDropped.Load(),
		CtrlDropped: c.ctrlDropped.Load(),
		Duplicated:  c.duplicated.Load(),
		Resets:      c.resets.Load(),
	}
}

// A faultModel decides the fate of the frames one connection writes: how
// many copies of each go out (0 drops it, 2 duplicates it). It is used only
// on the connection's loop, draws from a generator seeded per connection, and
// counts what it injects. A model with more faults (delays, a bandwidth cap,
// burst loss, partitions) implements this and is chosen in newFaultModel.
type faultModel interface {
	copies(now int64, t wire.FrameType, size int) int
}

// newFaultModel returns the model of f for the connection numbered stream,
// or nil when f injects nothing into frames.
func newFaultModel(f Faults, stream uint64, n *faultCounters) faultModel {
	if f.Drop == 0 && f.CtrlDrop == 0 && f.Dup == 0 {
		return nil
	}
	return &bernoulli{f: f, rng: rand.New(rand.NewPCG(f.Seed, stream)), n: n}
}

// bernoulli drops and duplicates each frame independently: DATA with
// probability Drop, ACKREQUEST, ACK, PING and PONG with CtrlDrop, then any
// of them with Dup. OPEN, CLOSE, GOAWAY and AUTH go out untouched.
type bernoulli struct {
	f   Faults
	rng *rand.Rand
	n   *faultCounters
}

func (m *bernoulli) copies(_ int64, t wire.FrameType, _ int) int {
	var drop float64
	var dropped *atomic.Uint64
	switch t {
	case wire.FrameData:
		drop, dropped = m.f.Drop, &m.n.dataDropped
	case wire.FrameAckRequest, wire.FrameAck, wire.FramePing, wire.FramePong:
		drop, dropped = m.f.CtrlDrop, &m.n.ctrlDropped
	default:
		return 1
	}
	if m.rng.Float64() < drop {
		dropped.Add(1)
		return 0
	}
	if m.rng.Float64() < m.f.Dup {
		m.n.duplicated.Add(1)
		return 2
	}
	return 1
}

// faultLink is a link that passes the frames written to it through a
// faultModel. Until the handshake is done (arm) its writes pass untouched:
// the preface is not framed, and its loss is modelled by Reset. The conn
// writes only whole frames through its link, so each write is cut into
// frames at their headers; a direct write, which bypasses the link, is never
// made on a connection with faults (see conn.setLink).
type faultLink struct {
	link
	model faultModel
	now   func() int64
	armed bool     // loop
	iov   [][]byte // loop: the frames that go out, one slice each
}

// arm starts applying the model. Loop only.
func (l *faultLink) arm() { l.armed = true }

func (l *faultLink) Write(b []byte) (int, error) {
	if !l.armed {
		return l.link.Write(b)
	}
	return l.Writev([][]byte{b})
}

func (l *faultLink) Writev(bs [][]byte) (int, error) {
	if !l.armed {
		return l.link.Writev(bs)
	}
	now := l.now()
	iov, total := l.iov[:0], 0
	for _, b := range bs {
		total += len(b)
		for len(b) > 0 {
			h, err := wire.DecodeHeader(b, math.MaxInt32)
			n := wire.HeaderLen + int(h.Length)
			if err != nil || n > len(b) {
				// Not a whole frame (the conn writes none such): as it is.
				iov = append(iov, b)
				break
			}
			for range l.model.copies(now, h.Type, n) {
				iov = append(iov, b[:n])
			}
			b = b[n:]
		}
	}
	l.iov = iov
	defer clear(iov)
	if len(iov) == 0 {
		return total, nil
	}
	if _, err := l.link.Writev(iov); err != nil {
		return 0, err
	}
	return total, nil
}
