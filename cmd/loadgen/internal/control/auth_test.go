package control

import (
	"bytes"
	"errors"
	"net"
	"strings"
	"testing"
)

func TestProofsAreBoundToRoleAndNonces(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	a, b := bytes.Repeat([]byte{1}, 32), bytes.Repeat([]byte{2}, 32)
	p := proof(key, Coordinator, a, b)
	for name, q := range map[string][]byte{
		"the other role":     proof(key, Agent, a, b),
		"swapped nonces":     proof(key, Coordinator, b, a),
		"another key":        proof([]byte("another key, 32 bytes long......"), Coordinator, a, b),
		"another peer nonce": proof(key, Coordinator, a, bytes.Repeat([]byte{3}, 32)),
		"another own nonce":  proof(key, Coordinator, bytes.Repeat([]byte{3}, 32), b),
	} {
		if bytes.Equal(p, q) {
			t.Errorf("a proof with %s equals the original", name)
		}
	}
}

// tcpPair is both ends of a loopback TCP connection (net.Pipe does not
// buffer, and both sides of the exchange write first).
func tcpPair(t *testing.T) (*Conn, *Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	d, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	a := <-accepted
	if a == nil {
		t.Fatal("accept failed")
	}
	ca, cd := NewConn(a), NewConn(d)
	t.Cleanup(func() { ca.Close(); cd.Close() })
	return cd, ca
}

func TestAuthenticate(t *testing.T) {
	key := bytes.Repeat([]byte("k"), 32)
	other := bytes.Repeat([]byte("x"), 32)
	for _, tt := range []struct {
		name            string
		coordKey, agent []byte
		wantOK          bool
	}{
		{"the same key on both sides passes", key, key, true},
		{"another key fails on both sides", key, other, false},
		{"no key on either side passes without a word", nil, nil, true},
	} {
		t.Run(tt.name, func(t *testing.T) {
			coord, agent := tcpPair(t)
			agentErr := make(chan error, 1)
			go func() { agentErr <- Authenticate(agent, tt.agent, Agent) }()
			cerr := Authenticate(coord, tt.coordKey, Coordinator)
			aerr := <-agentErr
			if tt.wantOK {
				if cerr != nil || aerr != nil {
					t.Fatalf("coordinator: %v, agent: %v", cerr, aerr)
				}
				return
			}
			if !errors.Is(cerr, ErrAuth) || !errors.Is(aerr, ErrAuth) {
				t.Fatalf("coordinator: %v, agent: %v; want ErrAuth on both", cerr, aerr)
			}
		})
	}
	t.Run("a peer without the key fails it, and is told", func(t *testing.T) {
		coord, agent := tcpPair(t)
		go func() {
			p := goodPlan()
			_ = coord.Send(Msg{Kind: KindPlan, Plan: &p}) // a coordinator that holds no key
		}()
		if err := Authenticate(agent, key, Agent); !errors.Is(err, ErrAuth) {
			t.Fatalf("agent: %v, want ErrAuth", err)
		}
		m, err := coord.Recv(0)
		if err != nil || m.Kind != KindAuth {
			t.Fatalf("the keyless peer read %+v, %v; want the challenge", m, err)
		}
	})
	t.Run("a challenge of the wrong length fails it, saying so", func(t *testing.T) {
		coord, agent := tcpPair(t)
		go func() { _ = coord.Send(Msg{Kind: KindAuth, Nonce: []byte("short")}) }()
		err := Authenticate(agent, key, Agent)
		if !errors.Is(err, ErrAuth) || !strings.Contains(err.Error(), "the peer's challenge is a nonce of 5 bytes, want 32") {
			t.Fatalf("agent: %v, want ErrAuth saying the nonce is 5 bytes, not 32", err)
		}
	})
}
