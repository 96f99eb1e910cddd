package transport

import (
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport/internal/handshake"
	"github.com/sluicehq/sluice/wire"
)

// Errors returned by the transport. Test them with errors.Is.
var (
	// ErrClosed means the node, peer or sender was closed.
	ErrClosed = errors.New("transport: closed")
	// ErrNoCredit is returned by TrySend when the channel's window or the
	// peer's budget is full until the receiver acknowledges.
	ErrNoCredit = errors.New("transport: no credit: the window is full until the receiver acknowledges")
	// ErrTooLarge means a payload is larger than a channel takes
	// ([Node.MaxPayload]: its window's bytes less [MaxMessageHead], or what
	// a frame of [WithMaxFrame] holds if that is less).
	ErrTooLarge = errors.New("transport: payload larger than a channel takes (its window, or a frame)")
	// ErrRejected means the peer refused this node for good (another
	// protocol version, failed authentication); the peer does not redial.
	ErrRejected = errors.New("transport: rejected by peer")
	// ErrHandshakeTimeout means a connection's preface did not arrive in time.
	ErrHandshakeTimeout = errors.New("transport: handshake timed out")
	// ErrIdleTimeout means nothing arrived on a connection for too long.
	ErrIdleTimeout = errors.New("transport: connection idle for too long")
	// ErrInboundBudget means a peer sent more than its windows allow.
	ErrInboundBudget = errors.New("transport: peer exceeded the inbound budget (it ignores flow control)")
	// ErrPeerNotReading means a peer went on sending while it left
	// unread more than a connection may hold for it (the answers to its
	// PINGs, ACKREQUESTs and OPENs, data): the connection is closed rather
	// than buffering for it without bound.
	ErrPeerNotReading = errors.New("transport: peer does not read what it is sent")
	// ErrGoAway means the peer sent GOAWAY.
	ErrGoAway = errors.New("transport: peer sent GOAWAY")
	// ErrAuthFailed means the peer and this node do not share a key: the
	// peer's proof did not match, one side has a key and the other none, or
	// the peer answered GOAWAY AUTH_FAILED. The error never shows a key.
	ErrAuthFailed = handshake.ErrAuthFailed
	// ErrHandshake means the peer sent a frame other than AUTH or GOAWAY
	// before authentication completed.
	ErrHandshake = handshake.ErrUnexpected
	// ErrInvalidAck means the receiver acknowledged messages this channel
	// never sent, or asked it to resume before what it had acknowledged:
	// the two sides cannot agree, so the channel is closed (and its
	// messages not yet acknowledged dropped). It comes wrapped in a
	// [ChannelError].
	ErrInvalidAck = errors.New("transport: the receiver's ack contradicts what was sent")
	// ErrBadKey means a key given to [WithKey] is unusable (too short).
	ErrBadKey = errors.New("transport: bad key")
)

// ConnError is the reason a connection was closed: a protocol fault by the
// peer, a GOAWAY, a timeout, or an I/O error. It wraps the underlying error
// (a wire sentinel such as wire.ErrChecksum, or one of this package's).
type ConnError struct {
	Remote string // the peer's address
	NodeID uint64 // the peer's node id, 0 if its preface never arrived
	Err    error
}

func (e *ConnError) Error() string {
	return fmt.Sprintf("transport: connection with %s (node %x): %v", e.Remote, e.NodeID, e.Err)
}

func (e *ConnError) Unwrap() error { return e.Err }

// ChannelError is why a channel was closed by the transport rather than by
// [Sender.Close]; its senders return it from then on.
type ChannelError struct {
	Channel taskid.Channel
	Err     error
}

func (e *ChannelError) Error() string {
	return fmt.Sprintf("transport: channel %v closed: %v", e.Channel, e.Err)
}

func (e *ChannelError) Unwrap() error { return e.Err }

// GoAwayError is a GOAWAY received from a peer.
type GoAwayError struct{ wire.GoAway }

func (e *GoAwayError) Error() string {
	return fmt.Sprintf("transport: peer sent GOAWAY %v: %s", e.Code, e.Message)
}

func (e *GoAwayError) Is(target error) bool {
	if target == ErrGoAway {
		return true
	}
	if target == ErrRejected {
		return e.Code == wire.GoAwayVersionMismatch || e.Code == wire.GoAwayAuthFailed
	}
	if target == ErrAuthFailed {
		return e.Code == wire.GoAwayAuthFailed
	}
	return false
}
