// Package handshake is the opening of a Sluice connection as a state
// machine without I/O: the exchange of prefaces and, when both sides hold a
// pre-shared key, the mutual challenge-response of wire/SPEC.md
// ("Authentication").
//
// The transport creates a [Machine] per connection, sends what [Machine.Start]
// returns, and feeds it the inbound bytes with [Machine.Feed] until it says
// the handshake is done; it sends whatever Feed returns to send. Randomness
// (the nonce) is passed in, so the machine is deterministic and can be fuzzed
// with arbitrary input split at arbitrary points.
//
// A Machine belongs to one goroutine at a time (the connection's loop).
package handshake

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/sluicehq/sluice/wire"
)

// Errors of the handshake. Test them with errors.Is.
var (
	// ErrAuthFailed means the two sides do not share a key: the peer's proof
	// does not match, or only one side has a key. The error's text never
	// contains a key or a proof.
	ErrAuthFailed = errors.New("transport: authentication failed")
	// ErrUnexpected means the peer sent a frame the handshake does not allow
	// at this point: data or control frames before authentication completed,
	// a second challenge, a proof before its challenge.
	ErrUnexpected = errors.New("transport: unexpected frame during the handshake")
)

// MinKeyLen is the shortest pre-shared key accepted, in bytes.
const MinKeyLen = 16

// NonceLen is the length of a challenge nonce.
const NonceLen = wire.AuthValueLen

// MaxHandshakeFrame limits the body of a frame before authentication
// completes: enough for an AUTH or the longest GOAWAY, far below the limit
// an authenticated peer gets, so a stranger cannot make a node buffer much.
const MaxHandshakeFrame = 16 + wire.MaxGoAwayMessage

// proofLabel starts every proof's input, so a proof can never be confused
// with an HMAC the key is used for elsewhere.
const proofLabel = "SLCE auth v1"

// Config is one side's part in a handshake.
type Config struct {
	NodeID uint64 // announced in the preface
	Flags  uint8  // preface flags besides FlagAuth (wire.FlagCompression)
	// Key is the pre-shared key, at least MinKeyLen bytes, or nil for none.
	// The Machine keeps a reference; the caller must not modify it.
	Key []byte
	// Dialer says this side dialed the TCP connection; the proof is bound
	// to the direction.
	Dialer bool
	// Nonce is this side's challenge, fresh from crypto/rand for every
	// connection. Unused without a Key.
	Nonce [NonceLen]byte
}

type state uint8

const (
	statePreface   state = iota // waiting for the peer's preface
	stateChallenge              // waiting for the peer's AUTH CHALLENGE
	stateProof                  // waiting for the peer's AUTH PROOF
	stateDone                   // the connection is open
	stateFailed                 // a fault or the peer's GOAWAY ended the handshake
)

// Machine runs one side of one connection's handshake. The zero value is
// not usable; call [New].
type Machine struct {
	cfg       Config
	st        state
	peer      wire.Preface
	peerNonce [NonceLen]byte
	out       []byte
}

// New returns a Machine for cfg. It does not validate the key length; the
// transport's options do.
func New(cfg Config) *Machine { return &Machine{cfg: cfg} }

// Start returns the bytes this side sends first, without waiting for the
// peer: its preface and, with a key, its challenge. The slice is new and
// belongs to the caller.
func (m *Machine) Start() []byte {
	p := wire.Preface{Version: wire.Version, Flags: m.cfg.Flags &^ wire.FlagAuth, NodeID: m.cfg.NodeID}
	if m.cfg.Key != nil {
		p.Flags |= wire.FlagAuth
	}
	b := wire.AppendPreface(make([]byte, 0, wire.PrefaceLen+wire.HeaderLen+wire.AuthBodyLen), p)
	if m.cfg.Key != nil {
		b = wire.AppendAuth(b, wire.Auth{Step: wire.AuthChallenge, Value: m.cfg.Nonce})
	}
	return b
}

// Step is what one call of [Machine.Feed] did.
type Step struct {
	// Consumed is how many input bytes the handshake used; the caller
	// discards them. After Done, the bytes beyond Consumed are the first
	// frames of the open connection.
	Consumed int
	// Out is what to send to the peer now, or nil. It is valid until the
	// next call of Feed.
	Out []byte
	// Done means the handshake is complete: the peer's preface is known
	// ([Machine.Peer]) and, with keys, the peer proved it holds the key.
	Done bool
	// GoAway is the peer's GOAWAY, if it sent one during the handshake
	// (after a failure of its own, say). The handshake is over; close the
	// connection without answering.
	GoAway *wire.GoAway
}

// Feed takes the inbound bytes received so far and not yet consumed, and
// advances the handshake as far as they allow. An error is a fault of the
// peer's (a wire error, [ErrUnexpected], [ErrAuthFailed]); answer it with a
// GOAWAY of [Code](err) and close. After Done, an error or a GoAway, Feed
// consumes nothing more. Feed does not keep in.
func (m *Machine) Feed(in []byte) (Step, error) {
	var s Step
	m.out = m.out[:0]
	for m.st < stateDone {
		rest := in[s.Consumed:]
		if m.st == statePreface {
			p, n, err := wire.DecodePreface(rest)
			if err == wire.ErrNeedMore {
				break
			}
			if err != nil {
				return m.fail(s, err)
			}
			s.Consumed += n
			m.peer = p
			mine, theirs := m.cfg.Key != nil, p.Flags&wire.FlagAuth != 0
			switch {
			case mine && !theirs:
				return m.fail(s, fmt.Errorf("%w: this node requires authentication, the peer has no key (its preface lacks FlagAuth)", ErrAuthFailed))
			case !mine && theirs:
				return m.fail(s, fmt.Errorf("%w: the peer requires authentication, this node has no key", ErrAuthFailed))
			case mine:
				m.st = stateChallenge
			default:
				m.st = stateDone
			}
			continue
		}
		f, n, err := wire.DecodeFrame(rest, MaxHandshakeFrame)
		if err == wire.ErrNeedMore {
			break
		}
		if err != nil {
			return m.fail(s, err)
		}
		s.Consumed += n
		switch f.Type {
		case wire.FrameGoAway:
			g, err := wire.ParseGoAway(f.Body)
			if err != nil {
				return m.fail(s, err)
			}
			m.st = stateFailed
			s.GoAway = &g
			return s, nil
		case wire.FrameAuth:
		default:
			return m.fail(s, &wire.FrameError{Type: f.Type, Offset: -1, Err: ErrUnexpected,
				Detail: "only AUTH and GOAWAY frames may come before authentication completes"})
		}
		a, err := wire.ParseAuth(f.Body)
		if err != nil {
			return m.fail(s, err)
		}
		switch {
		case m.st == stateChallenge && a.Step == wire.AuthChallenge:
			m.peerNonce = a.Value
			m.st = stateProof
			m.out = wire.AppendAuth(m.out, wire.Auth{Step: wire.AuthProof, Value: m.proof(m.cfg.Dialer)})
		case m.st == stateProof && a.Step == wire.AuthProof:
			want := m.proof(!m.cfg.Dialer)
			if !hmac.Equal(a.Value[:], want[:]) {
				return m.fail(s, fmt.Errorf("%w: the peer's proof does not match (the two nodes have different keys, or the exchange was replayed)", ErrAuthFailed))
			}
			m.st = stateDone
		default:
			return m.fail(s, &wire.FrameError{Type: wire.FrameAuth, Offset: 0, Err: ErrUnexpected,
				Detail: fmt.Sprintf("an AUTH %v while waiting for the peer's %v", a.Step, m.waitingFor())})
		}
	}
	s.Done = m.st == stateDone
	if len(m.out) > 0 {
		s.Out = m.out
	}
	return s, nil
}

func (m *Machine) waitingFor() wire.AuthStep {
	if m.st == stateChallenge {
		return wire.AuthChallenge
	}
	return wire.AuthProof
}

func (m *Machine) fail(s Step, err error) (Step, error) {
	m.st = stateFailed
	s.Out, s.Done = nil, false
	return s, err
}

// proof computes the proof of the dialer's side (dialer true) or of the
// acceptor's, over both nonces and both node ids in dialer, acceptor order.
func (m *Machine) proof(dialer bool) [wire.AuthValueLen]byte {
	nonceD, nonceA := m.cfg.Nonce, m.peerNonce
	idD, idA := m.cfg.NodeID, m.peer.NodeID
	if !m.cfg.Dialer {
		nonceD, nonceA = nonceA, nonceD
		idD, idA = idA, idD
	}
	role := byte('A')
	if dialer {
		role = 'D'
	}
	mac := hmac.New(sha256.New, m.cfg.Key)
	var buf [len(proofLabel) + 1 + 2*NonceLen + 16]byte
	b := append(buf[:0], proofLabel...)
	b = append(b, role)
	b = append(b, nonceD[:]...)
	b = append(b, nonceA[:]...)
	b = binary.BigEndian.AppendUint64(b, idD)
	b = binary.BigEndian.AppendUint64(b, idA)
	mac.Write(b)
	var out [wire.AuthValueLen]byte
	mac.Sum(out[:0])
	return out
}

// Done reports whether the handshake completed.
func (m *Machine) Done() bool { return m.st == stateDone }

// Peer returns the peer's preface, once Feed has decoded it.
func (m *Machine) Peer() wire.Preface { return m.peer }

// Authenticated reports whether the handshake completed with both sides
// proving the key.
func (m *Machine) Authenticated() bool { return m.st == stateDone && m.cfg.Key != nil }

// Code is the GOAWAY code that answers a fault Feed returned.
func Code(err error) wire.GoAwayCode {
	switch {
	case errors.Is(err, ErrAuthFailed):
		return wire.GoAwayAuthFailed
	case errors.Is(err, wire.ErrVersion):
		return wire.GoAwayVersionMismatch
	case errors.Is(err, wire.ErrFrameTooLarge):
		return wire.GoAwayLimit
	}
	return wire.GoAwayProtocolError
}
