package control

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"
)

// The control connection is authenticated, when both sides hold a key, by
// the same kind of mutual challenge-response the transport uses: each side
// sends a fresh nonce ("auth"), then proves it holds the key with an HMAC
// over its role and both nonces ("proof"). The role makes a reflected proof
// useless and the nonces a replayed one.

// ErrAuth means a control peer failed to prove it holds the key.
var ErrAuth = errors.New("control: authentication failed (do both sides use the same --key-file?)")

// Role is a side of the exchange; each side's proof names its own.
type Role byte

// The two roles.
const (
	Coordinator Role = 'c'
	Agent       Role = 'a'
)

// AuthTimeout bounds each read of the exchange.
const AuthTimeout = 5 * time.Second

const nonceLen = 32

const authLabel = "sluice loadgen control v1"

func proof(key []byte, role Role, own, other []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(authLabel))
	m.Write([]byte{byte(role)})
	m.Write(own)
	m.Write(other)
	return m.Sum(nil)
}

// Authenticate runs the exchange on c as role. With a nil key it does
// nothing. A peer that fails it gets an "error" message and the caller
// ErrAuth.
func Authenticate(c *Conn, key []byte, role Role) error {
	if key == nil {
		return nil
	}
	peerRole := Agent
	if role == Agent {
		peerRole = Coordinator
	}
	var nonce [nonceLen]byte
	_, _ = rand.Read(nonce[:]) // crypto/rand.Read never fails
	if err := c.Send(Msg{Kind: KindAuth, Nonce: nonce[:]}); err != nil {
		return err
	}
	m, err := c.Recv(AuthTimeout)
	if err != nil {
		return err
	}
	if m.Kind == KindError {
		return fmt.Errorf("%w: the peer says: %s", ErrAuth, m.Error)
	}
	switch {
	case m.Kind != KindAuth:
		return fmt.Errorf("%w: the peer sent %q instead of its challenge", ErrAuth, m.Kind)
	case len(m.Nonce) != nonceLen:
		return fmt.Errorf("%w: the peer's challenge is a nonce of %d bytes, want %d", ErrAuth, len(m.Nonce), nonceLen)
	}
	if err := c.Send(Msg{Kind: KindProof, MAC: proof(key, role, nonce[:], m.Nonce)}); err != nil {
		return err
	}
	p, err := c.Recv(AuthTimeout)
	if err != nil {
		return err
	}
	if p.Kind != KindProof || !hmac.Equal(p.MAC, proof(key, peerRole, m.Nonce, nonce[:])) {
		_ = c.Send(Msg{Kind: KindError, Error: "authentication failed"})
		return ErrAuth
	}
	return nil
}
