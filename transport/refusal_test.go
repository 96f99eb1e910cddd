package transport

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/sluicehq/sluice/taskid"
)

// heldListener accepts connections and leaves each unanswered until release
// is closed; serve then takes it over. It returns the address.
func heldListener(t *testing.T, release <-chan struct{}, serve func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				<-release
				serve(c)
			}()
		}
	}()
	return ln.Addr().String()
}

func TestSendersOpenBeforeAPeerRefusesThisNodeFailWithTheRefusal(t *testing.T) {
	cases := []struct {
		name  string
		serve func(t *testing.T) func(net.Conn)
	}{
		{"the peer speaks another version", func(*testing.T) func(net.Conn) {
			return func(c net.Conn) {
				b := goodPreface()
				b[4] = 9
				_, _ = c.Write(b)
				_, _ = io.Copy(io.Discard, c)
			}
		}},
		{"the peer's key differs", func(t *testing.T) func(net.Conn) {
			rx := listeningNode(t, nil, WithKey(testKey))
			return func(c net.Conn) { // a proxy to rx
				r, err := net.Dial("tcp", rx.Addr())
				if err != nil {
					c.Close()
					return
				}
				go func() { _, _ = io.Copy(r, c); r.Close() }()
				_, _ = io.Copy(c, r)
				c.Close()
			}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			release := make(chan struct{})
			addr := heldListener(t, release, tc.serve(t))
			tx := testNode(t, WithKey(wrongKey))
			p, err := tx.Peer(addr)
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t, 10*time.Second) // hang guard
			s, err := p.OpenSender(ctx, taskid.ID{}, taskid.ID{Processor: 1})
			if err != nil {
				t.Fatal(err)
			}
			// Fill the window, so that Send waits for credit when the
			// refusal comes.
			for i := 0; ; i++ {
				err := s.TrySend(int64(i), payload(s.Channel(), uint64(i), 100))
				if errors.Is(err, ErrNoCredit) {
					break
				}
				if err != nil {
					t.Fatalf("TrySend before the refusal: %v", err)
				}
			}
			sendErr, flushErr := make(chan error, 1), make(chan error, 1)
			go func() { sendErr <- s.Send(ctx, 0, payload(s.Channel(), 0, 100)) }()
			go func() { flushErr <- s.Flush(ctx) }()
			close(release)

			if err := p.WaitConnected(ctx); !errors.Is(err, ErrRejected) {
				t.Fatalf("WaitConnected: %v, want the refusal (ErrRejected)", err)
			}
			if err := <-sendErr; !errors.Is(err, ErrRejected) {
				t.Errorf("a Send waiting for credit: %v, want the refusal (ErrRejected)", err)
			}
			if err := <-flushErr; !errors.Is(err, ErrRejected) {
				t.Errorf("a Flush waiting for acks: %v, want the refusal (ErrRejected)", err)
			}
			if err := s.TrySend(0, payload(s.Channel(), 0, 100)); !errors.Is(err, ErrRejected) {
				t.Errorf("TrySend after the refusal: %v, want the refusal (ErrRejected)", err)
			}
			if err := s.Flush(ctx); !errors.Is(err, ErrRejected) {
				t.Errorf("Flush after the refusal: %v, want the refusal (ErrRejected)", err)
			}
			var ce *ChannelError
			if err := s.TrySend(0, payload(s.Channel(), 0, 100)); !errors.As(err, &ce) || ce.Channel != s.Channel() {
				t.Errorf("TrySend after the refusal: %v, want a ChannelError naming %v", err, s.Channel())
			}
			if err := tx.Close(ctx); !errors.Is(err, ErrRejected) {
				t.Errorf("Close with messages the refusing peer never acknowledged: %v, want the refusal (ErrRejected)", err)
			}
		})
	}
}
