package main

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"time"
)

// The control connection between a coordinator and an agent is
// authenticated, when both were given --key-file, by the same kind of mutual
// challenge-response the transport uses: each side sends a fresh nonce, then
// proves it holds the key with an HMAC over its role and both nonces. The
// role makes a reflected proof useless and the nonces a replayed one.

// Control message types of the exchange.
const (
	msgAuth  = "auth"
	msgProof = "proof"
)

// errCtlAuth means a control peer failed to prove it holds the key.
var errCtlAuth = errors.New("loadgen: control connection authentication failed (do both sides use the same --key-file?)")

const ctlAuthTimeout = 5 * time.Second

const ctlAuthLabel = "sluice loadgen control v1"

func ctlProof(key []byte, role byte, own, other []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(ctlAuthLabel))
	m.Write([]byte{role})
	m.Write(own)
	m.Write(other)
	return m.Sum(nil)
}

// ctlAuthenticate runs the exchange on cc as the coordinator or the agent.
// With a nil key it does nothing.
func ctlAuthenticate(cc *ctlConn, key []byte, coordinator bool) error {
	if key == nil {
		return nil
	}
	role, peerRole := byte('a'), byte('c')
	if coordinator {
		role, peerRole = peerRole, role
	}
	var nonce [32]byte
	_, _ = rand.Read(nonce[:]) // crypto/rand.Read never fails
	if err := cc.send(ctlMsg{Type: msgAuth, Nonce: nonce[:]}); err != nil {
		return err
	}
	m, err := cc.recv(ctlAuthTimeout)
	if err != nil {
		return err
	}
	if m.Type == msgError {
		return fmt.Errorf("%w: the peer says: %s", errCtlAuth, m.Error)
	}
	if m.Type != msgAuth || len(m.Nonce) != len(nonce) {
		return fmt.Errorf("%w: the peer sent %q instead of its challenge", errCtlAuth, m.Type)
	}
	if err := cc.send(ctlMsg{Type: msgProof, MAC: ctlProof(key, role, nonce[:], m.Nonce)}); err != nil {
		return err
	}
	p, err := cc.recv(ctlAuthTimeout)
	if err != nil {
		return err
	}
	if p.Type != msgProof || !hmac.Equal(p.MAC, ctlProof(key, peerRole, m.Nonce, nonce[:])) {
		_ = cc.send(ctlMsg{Type: msgError, Error: "authentication failed"})
		return errCtlAuth
	}
	return nil
}
