// Package bench measures and reports Sluice's end-to-end performance. It is
// the measuring half of cmd/loadgen: the scenarios there move messages, this
// package decides when each message is due, records how late it arrived, and
// writes what happened in a form people and scripts can read.
//
// Data flows through it like this:
//
//  1. A driver ([FixedRate] or [MaxRate]) calls a [Target] once per message
//     with the message's index and its intended send time on the [Now] clock.
//     The scenario puts the intended time into the message.
//  2. Whoever sees the message complete (the receiving task, or the driver
//     itself for request/response targets) records Now()-intended into a
//     [Recorder], an HdrHistogram safe for concurrent use.
//  3. While the run goes on, a [Progress] prints one line per second and keeps
//     a [Sample] per second plus the fault [Event]s the scenario marks.
//  4. At the end the scenario fills a [Report] and calls [WriteDir], which
//     writes report.json, report.md, latency.hgrm, latency.svg and
//     timeline.svg. Sweeps over message size and channel count go into a
//     [SweepReport].
//
// Beside the system under test, the package holds the plain-TCP baselines
// its figures are quoted against (tcp.go: the 64 KiB ideal-batching ceiling,
// one write per message behind the same fixed-rate driver, a ping-pong
// echo), each split into a sending and a receiving half so that the halves
// can run in one process or two, and a [Scorecard]: figures of several runs
// measured together, each compared with a baseline from the same run, as a
// ratio with a goal and a verdict (loadgen bench writes one).
//
// Latency is always measured from the intended send time, never from the
// moment the message was actually handed to the transport, so a sender that
// falls behind schedule shows up as latency instead of silently sending fewer
// messages (the "coordinated omission" mistake).
//
// The package has no transport code and no dependency besides HdrHistogram
// and the standard library; SVG charts are written by hand with fmt.
package bench
