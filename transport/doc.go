// Package transport moves the messages of a stream-processing engine's tasks
// between nodes over TCP, on gnet event loops.
//
// A [Node] listens for peers and dials them. Each remote node is a [Peer]; a
// peer's connection carries many logical channels, one per (source task,
// target task, epoch), each known on the wire by a small channel number.
//
// The path of one message: [Sender.Send] copies the payload into the
// channel's window (window.Sender), which keeps it until the target
// acknowledges it, and marks the channel ready on its connection. The
// connection's event loop pulls runs of messages from its ready channels in
// turn, encodes them into one DATA frame (wire), and writes it at once when
// the socket is idle, or as soon as a previous write drains when it is busy
// (batch.Policy). The receiving loop decodes the batch in place, checks
// channel, epoch and sequence (lossdetect.Receiver), and appends accepted
// runs to the target task's bounded inbox. The task's handler consumes them
// on its own goroutine; once it has consumed every message before an
// AckRequest, the receiver answers with an Ack, and the source frees credit
// or re-sends from the first missing sequence (lossdetect.Tracker).
//
// Channels outlive connections: when a connection breaks, the peer redials
// with exponential backoff and jitter, each channel re-opens with its epoch,
// and sending resumes from the target's next expected sequence number, so no
// message is lost or repeated while both tasks live.
//
// Every buffer is bounded: a channel's window in messages and bytes, a
// peer's retained bytes, and each connection's inbound buffered bytes. A
// peer that sends malformed frames loses its own connection with a typed
// error; other connections carry on.
package transport
