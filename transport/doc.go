// Package transport moves the messages of a stream-processing engine's tasks
// between nodes over TCP, on gnet event loops.
//
// A [Node] listens for peers and dials them. Each remote node is a [Peer]; a
// peer's connection carries many logical channels, one per (source task,
// target task, epoch), each known on the wire by a small channel number.
// A connection carries data one way: the node that sends dials, and the
// acks come back on the same connection. Two nodes that send to each other
// hold one connection each way (as Flink's network stack and Akka's Artery
// do): each side's dialer alone redials and re-opens its channels, and there
// is no simultaneous-open race to settle. [WithConnectionsPerPeer] adds
// connections in the same direction.
//
// The path of one message: [Sender.Send] writes it, in its wire encoding
// (timestamp delta, length, payload), into the channel's window
// (window.Sender), which keeps it until the target acknowledges it, and
// marks the channel ready on its connection. The connection's event loop
// pulls runs of messages from its ready channels in turn, copies each run
// as it is stored behind a run header into one DATA frame (wire), and
// writes it at once when
// the socket is idle, or as soon as a previous write drains when it is busy
// (batch.Policy). On a gnet connection that has been idle for a while (no
// write within what a direct write takes, at least 5 µs), for a
// channel with few messages unacknowledged, the sending goroutine writes
// that batch to the socket itself rather than waking the loop: one thread wake-up fewer per message at low and moderate rates,
// while a fast producer, finding writes recent, leaves them to the loop and
// its batching. A producer that outruns the loop, with a batch's worth of
// its channel unsent, writes that full batch itself too, as plain TCP's
// writer does, and its connection is then stream-driven: the loop leaves
// the streaming channels' batches to their senders until they stop, and a
// sender about to wait in Send for its window's credit writes its own tail. A direct write the kernel
// takes only in part is finished by the loop before anything newer. The receiving loop decodes the batch in place, checks
// channel, epoch and sequence (lossdetect.Receiver), and hands accepted
// runs to the target task: by default into its bounded inbox, whose handler
// consumes them on the task's own goroutine ([Node.Handle]); or, for a
// handler that never blocks, on the loop itself, in place, with no copy and
// no hand-off ([Node.HandleInline]), as a plain TCP reader parses what it
// reads. Once the task has consumed every message before an AckRequest, the
// receiver answers with an Ack, and the source frees credit or re-sends
// from the first missing sequence (lossdetect.Tracker).
//
// An embedder needs this package and taskid only. A [Node] is configured
// with flat functional options ([WithWindow](msgs, bytes), [WithMaxBatch],
// [WithLinger], [WithAckTimeouts], [WithPeerBudget], ...), each documenting
// its default; the state machines behind them (window, lossdetect, batch)
// are not part of the API. Messages go out as [Message] values ([Sender.Send]
// takes a timestamp and a payload, [Sender.SendRun] a run of Messages) and
// arrive as runs of Messages at a [Handler]. [Node.Stats] returns the
// node's counters (connections, peers, injected faults, refusals) and
// [Node.ChannelStats] those of each outgoing channel. Each connection also
// estimates its peer's clock from its PING round trips ([Peer.ClockOffset],
// [Node.ClockOffset]), so that timestamps stamped on another host can be
// read against this node's [Node.Clock] within a stated error.
//
// Channels outlive connections: when a connection breaks, the peer redials
// with exponential backoff and jitter, each channel re-opens with its epoch,
// and sending resumes from the target's next expected sequence number, so no
// message is lost or repeated while both tasks live. A peer gone for good is
// closed with [Peer.Close]: it stops redialing, its senders fail with
// ErrClosed, and the node lets go of it.
//
// Connections run on one of two backends behind one internal interface:
// gnet event loops (the default) or the standard net package
// ([WithBackend](BackendNet)), one reading goroutine and one goroutine that
// runs the connection's callbacks and writes. Either way a connection's
// state is touched by one goroutine at a time. [WithTLS] encrypts with TLS
// 1.3 on the net backend.
//
// On gnet, the connections of every node in a process share one group of
// GOMAXPROCS-1 event loops (at least one); listening and dialing park in
// Go's netpoller, and a connection joins the group once it exists. The
// number is the threading model's point: a loop waits in epoll_wait, a
// system call during which its thread keeps its P until the runtime's
// monitor takes it back, 20 µs to 20 ms later. With a loop per P, every P
// can sit in epoll_wait while a fired timer or a woken goroutine waits for
// one; with one P always free of loops, Go code runs when it is ready.
//
// The package never changes its threads' scheduling policy or affinity:
// Go runs its goroutines and the embedder's on the same threads. Where a
// sending process runs flat out on a small machine it shares with its
// receiver, running it under SCHED_BATCH (chrt -b 0), whose threads do not
// preempt a running thread when they wake, or on a CPU of its own
// (taskset), is the deployment's lever: on a 2-core AMD EPYC VM, 100-byte
// messages from one process to another moved 17-22 M msgs/s under
// SCHED_BATCH against 13-17 M without (results/cpu-budget).
//
// Every connection opens with a handshake (internal/handshake, a state
// machine without I/O): both sides send a preface; with [WithKey] both then
// prove, by HMAC-SHA256 over both sides' fresh nonces and node ids, that
// they hold the same pre-shared key, before any channel opens (wire/SPEC.md,
// "Authentication"). A wrong or missing key closes the connection with
// GOAWAY AUTH_FAILED and [ErrAuthFailed] on both sides; keys never appear in
// logs, errors or stats.
//
// Every buffer is bounded: a channel's window in messages and bytes, the
// memory of all windows to one peer ([WithPeerBudget]), each connection's
// messages received and not yet consumed ([WithInboundBudget]: payloads
// and records), its raw inbound bytes (at most one frame of [WithMaxFrame]
// plus one read, and before authentication one small frame; on the net
// backend, while a write to the peer blocks, also what the peer sent
// meanwhile, up to what a connection may hold for its peer), and what it
// holds for a peer that sends but does not read ([ErrPeerNotReading]).
// Limits on frame size, channels per connection, the (source, target)
// pairs the node keeps receiving state for ([WithMaxReceivers]),
// connections per remote address, handshake time and idle time each have
// an option. A peer that
// sends malformed frames or passes a limit loses its own connection with a
// GOAWAY and a typed error; other connections carry on. [Node.Stats] counts
// the refusals ([RefusedStats]).
package transport
