package main

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/transport"
)

// minExpected is how many faults of a kind a run must have expected before
// it fails for having had none. Each chance (a frame) fires independently
// with the configured probability p, so n chances fire none with
// probability (1-p)^n <= e^(-np): below e^-50 here. A correct run cannot
// fail this way; one whose injector did nothing cannot pass.
const minExpected = 50

// timedSlack is what the timed checks (reset, partition, crash, kill) allow
// beyond the schedule, for nodes that start after the run does (worker
// processes) and a loaded machine.
const timedSlack = 2 * time.Second

// faultChances is what a run's nodes did that its faults act on, counted
// by the connections, apart from the fault injector, so that an injector
// that never ran still leaves chances to hold its zero counts against.
type faultChances struct {
	dataFrames, ctrlFrames int64
	// ran is how long the nodes ran with the faults on their own fault
	// clocks (transport.Node.StartFaultClock); 0 leaves the timed faults (reset, partition) unchecked, as when
	// killed processes restart them.
	ran time.Duration
}

// checkTransportFaults returns a sentence for each fault kind f configures
// that never happened (s counts what the nodes injected) although the run
// gave it the chance: minExpected or more expected from the frames
// written, or a reset or partition due well inside the time the nodes ran.
// The bandwidth cap is not checked: each connection has a bucket of its
// own, and how many connections a run went through is not counted.
func checkTransportFaults(f transport.Faults, s transport.FaultStats, c faultChances) []string {
	var out []string
	frames := float64(c.dataFrames + c.ctrlFrames)
	dropped := float64(s.DataDropped + s.CtrlDropped)
	never := func(kind string, expected, chances float64, what, of string) {
		if expected >= minExpected {
			out = append(out, fmt.Sprintf("%s was configured and %s, of %.0f %s written (about %.0f expected): the fault was not injected",
				kind, what, chances, of, expected))
		}
	}
	if f.Drop > 0 && s.DataDropped == 0 {
		never(fmt.Sprintf("drop=%g", f.Drop), f.Drop*float64(c.dataFrames), float64(c.dataFrames), "no DATA frame was dropped", "DATA frames")
	}
	if f.CtrlDrop > 0 && s.CtrlDropped == 0 {
		never(fmt.Sprintf("ctrldrop=%g", f.CtrlDrop), f.CtrlDrop*float64(c.ctrlFrames), float64(c.ctrlFrames),
			"no control frame was dropped", "ACKREQUEST, ACK, PING and PONG frames")
	}
	if f.Dup > 0 && s.Duplicated == 0 {
		// Dup draws for the frames Drop and CtrlDrop spared.
		n := max(frames-dropped, 0)
		never(fmt.Sprintf("dup=%g", f.Dup), f.Dup*n, n, "no frame was duplicated", "DATA and control frames (less those dropped)")
	}
	if g := f.GE; (g.P > 0 || g.LossGood > 0) && s.GEDropped == 0 {
		// A lower bound: each frame in the good state (R/(P+R) of them
		// in the long run) is lost itself with LossGood, or moves the
		// chain to the bad state with P, where the next is lost with
		// LossBad.
		good := 1.0
		if g.P > 0 {
			good = g.R / (g.P + g.R)
		}
		n := max(frames-dropped, 0)
		never(fmt.Sprintf("ge=%g:%g:%g:%g", g.P, g.R, g.LossBad, g.LossGood), n*good*(g.P*g.LossBad+g.LossGood), n,
			"the Gilbert-Elliott model dropped no frame", "DATA and control frames (less those dropped)")
	}
	if (f.Delay > 0 || f.Jitter > 0) && s.Delayed == 0 {
		// A frame is delayed when Delay plus its jitter, drawn uniformly
		// from [-Jitter, Jitter] in nanoseconds, is positive.
		p := 1.0
		if f.Jitter >= f.Delay {
			p = float64(f.Jitter+f.Delay) / float64(2*f.Jitter+1)
		}
		n := max(frames-dropped-float64(s.GEDropped), 0)
		never(fmt.Sprintf("delay=%v,jitter=%v", f.Delay, f.Jitter), p*n, n, "no frame was delayed", "DATA and control frames (less those dropped)")
	}
	if c.ran > 0 && f.Reset > 0 && s.Resets == 0 && c.ran >= 2*f.Reset+timedSlack {
		// The first reset is due Reset after the node started, then one
		// every Reset while a connection is up.
		out = append(out, fmt.Sprintf("reset=%v was configured and no connection was reset in %.1f s: the fault was not injected", f.Reset, c.ran.Seconds()))
	}
	if c.ran > 0 && f.PartitionFor >= 2*time.Second && s.PartitionHeld == 0 && c.ran >= f.PartitionAt+f.PartitionFor+timedSlack {
		// Both sides ping every second (the default), so a partition of
		// 2 s or more holds frames back.
		out = append(out, fmt.Sprintf("partition=%v@%v was configured and the %.1f s run held no frame back: the partition did not happen",
			f.PartitionFor, f.PartitionAt, c.ran.Seconds()))
	}
	return out
}

// chancesNote says what the transport faults f had to act on, for the
// report's notes; "" when f injects nothing.
func chancesNote(f transport.Faults, c faultChances) string {
	if !f.Enabled() {
		return ""
	}
	return fmt.Sprintf("the faults %s had %d DATA frames and %d ACKREQUEST, ACK, PING and PONG frames to act on (written by the nodes, counted apart from the fault injector)",
		f.String(), c.dataFrames, c.ctrlFrames)
}

// checkChaos returns a sentence for each of the engine's crash and kill
// faults configured with a period that never fired in a run of ran. The
// chaos driver's first fault is due by 1.5 periods after the first
// generation starts (which it does as the run starts), and only a fault of
// the other kind can make it refuse one, so a run of 3 periods that saw
// none did not inject it.
func checkChaos(crash, kill time.Duration, crashes, kills int64, ran time.Duration) []string {
	var out []string
	for _, k := range []struct {
		name   string
		period time.Duration
		n      int64
		what   string
	}{{"crash", crash, crashes, "no task crashed"}, {"kill", kill, kills, "no node was killed"}} {
		if k.period > 0 && k.n == 0 && ran >= 3*k.period {
			out = append(out, fmt.Sprintf("%s=%v was configured and %s in %.1f s: the fault was not injected", k.name, k.period, k.what, ran.Seconds()))
		}
	}
	return out
}

// checkRecoveries returns a sentence when a run that injected no crash and
// no kill recovered anyway: a task failed on its own, which the run's
// exactly-once check alone would let pass unremarked.
func checkRecoveries(crash, kill time.Duration, recoveries int64, expected bool) []string {
	if crash > 0 || kill > 0 || recoveries == 0 || expected {
		return nil
	}
	return []string{fmt.Sprintf("%d recover%s though no crash or kill fault was configured: a task failed on its own (the log says why; --expect-recoveries accepts this)",
		recoveries, map[bool]string{true: "y", false: "ies"}[recoveries == 1])}
}

// injectFaults is what the nodes of a run are given of its transport
// faults: all of them, except in tests that check what a run says when
// its injector did nothing.
var injectFaults = func(f transport.Faults) transport.Faults { return f }
