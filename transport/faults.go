package transport

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
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

// injector decides the fate of one connection's outgoing frames. It is used
// only on the connection's event loop.
type injector struct {
	f   Faults
	rng *rand.Rand
	n   *faultCounters
}

func newInjector(f Faults, stream uint64, n *faultCounters) *injector {
	if f.Drop == 0 && f.CtrlDrop == 0 && f.Dup == 0 {
		return nil
	}
	return &injector{f: f, rng: rand.New(rand.NewPCG(f.Seed, stream)), n: n}
}

// data says how many times to send a DATA frame: 0, 1 or 2.
func (in *injector) data() int {
	if in == nil {
		return 1
	}
	if in.rng.Float64() < in.f.Drop {
		in.n.dataDropped.Add(1)
		return 0
	}
	if in.rng.Float64() < in.f.Dup {
		in.n.duplicated.Add(1)
		return 2
	}
	return 1
}

// ctrl says how many times to send a flow-control or liveness frame.
func (in *injector) ctrl() int {
	if in == nil {
		return 1
	}
	if in.rng.Float64() < in.f.CtrlDrop {
		in.n.ctrlDropped.Add(1)
		return 0
	}
	if in.rng.Float64() < in.f.Dup {
		in.n.duplicated.Add(1)
		return 2
	}
	return 1
}
