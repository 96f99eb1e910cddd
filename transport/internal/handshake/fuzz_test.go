package handshake

import (
	"bytes"
	"errors"
	"testing"

	"github.com/sluicehq/sluice/wire"
)

// knownFault reports whether err is one of the faults Feed may return.
func knownFault(err error) bool {
	for _, s := range []error{ErrAuthFailed, ErrUnexpected, wire.ErrBadMagic, wire.ErrVersion, wire.ErrReserved,
		wire.ErrUnknownFrame, wire.ErrFrameTooLarge, wire.ErrVarint, wire.ErrChecksum, wire.ErrOverrun, wire.ErrTrailing} {
		if errors.Is(err, s) {
			return true
		}
	}
	return false
}

// feedResult is the whole effect of feeding a machine some input.
type feedResult struct {
	consumed int
	out      []byte
	done     bool
	goaway   bool
	fault    error
}

// feed gives m the input in pieces cut at the given points, keeping the
// unconsumed rest as the transport does, and sums the effects.
func feed(t *testing.T, m *Machine, in []byte, cuts []int) feedResult {
	var r feedResult
	var buf []byte
	prev := 0
	for _, c := range append(cuts, len(in)) {
		if c < prev || c > len(in) {
			continue
		}
		buf = append(buf, in[prev:c]...)
		prev = c
		s, err := m.Feed(buf)
		if s.Consumed < 0 || s.Consumed > len(buf) {
			t.Fatalf("consumed %d of %d bytes", s.Consumed, len(buf))
		}
		if err != nil && (s.Done || s.Out != nil) {
			t.Fatalf("a fault with Done %v and %d bytes to send", s.Done, len(s.Out))
		}
		r.consumed += s.Consumed
		buf = buf[s.Consumed:]
		r.out = append(r.out, s.Out...)
		if err != nil {
			if !knownFault(err) {
				t.Fatalf("a fault of no known kind: %v", err)
			}
			r.fault = err
			return r
		}
		if s.GoAway != nil {
			r.goaway = true
			return r
		}
		if s.Done {
			r.done = true
			return r
		}
	}
	return r
}

// FuzzHandshake feeds one side of a handshake arbitrary peer bytes, whole
// and split at arbitrary points, with and without a key, on either side of
// the connection. Seeds are honest peers' complete and cut transcripts.
// Whatever the input: no panic, nothing consumed twice, the same outcome
// however the bytes are split, never Done with a key unless the peer's
// proof is exactly the one an honest peer with the key would send.
func FuzzHandshake(f *testing.F) {
	for _, dialer := range []bool{false, true} {
		for _, withKey := range []bool{false, true} {
			var k []byte
			if withKey {
				k = key
			}
			me := New(Config{NodeID: 1, Key: k, Dialer: dialer, Nonce: nonce(10)})
			peer := New(Config{NodeID: 2, Key: k, Dialer: !dialer, Nonce: nonce(20)})
			in := peer.Start()
			s, _ := peer.Feed(me.Start())
			in = append(in, s.Out...)
			in = wire.AppendPing(in, 1, 0)
			for cut := 0; cut <= len(in); cut += 7 {
				f.Add(in, uint16(cut), uint16(cut/2), withKey, dialer)
			}
			f.Add(append(in[:wire.PrefaceLen:wire.PrefaceLen], wire.AppendGoAway(nil, wire.GoAway{Code: wire.GoAwayAuthFailed, Message: "x"})...), uint16(3), uint16(0), withKey, dialer)
		}
	}
	f.Fuzz(func(t *testing.T, in []byte, cut1, cut2 uint16, withKey, dialer bool) {
		var k []byte
		if withKey {
			k = key
		}
		cfg := Config{NodeID: 1, Key: k, Dialer: dialer, Nonce: nonce(10)}
		whole := feed(t, New(cfg), in, nil)
		cuts := []int{int(cut1) % (len(in) + 1), int(cut2) % (len(in) + 1)}
		if cuts[0] > cuts[1] {
			cuts[0], cuts[1] = cuts[1], cuts[0]
		}
		split := feed(t, New(cfg), in, cuts)
		if whole.done != split.done || whole.goaway != split.goaway || (whole.fault == nil) != (split.fault == nil) {
			t.Fatalf("whole: %+v; split at %v: %+v", whole, cuts, split)
		}
		if whole.fault == nil && (whole.consumed != split.consumed || !bytes.Equal(whole.out, split.out)) {
			t.Fatalf("whole consumed %d and sent %x; split at %v consumed %d and sent %x", whole.consumed, whole.out, cuts, split.consumed, split.out)
		}
		if whole.done && withKey {
			// Only an honest peer's proof opens the connection: rebuild
			// the peer from what it announced and compare its proof.
			m := New(cfg)
			m.Start()
			r := feed(t, m, in[:wire.PrefaceLen+wire.HeaderLen+wire.AuthBodyLen], nil)
			if r.fault != nil {
				t.Fatalf("the prefix that opened the connection now fails: %v", r.fault)
			}
			honest := New(Config{NodeID: m.peer.NodeID, Key: k, Dialer: !dialer, Nonce: m.peerNonce})
			honest.Start()
			hs, _ := honest.Feed(New(cfg).Start())
			proofAt := wire.PrefaceLen + wire.HeaderLen + wire.AuthBodyLen
			// Reserved flag bits may differ; the proof value may not.
			v := wire.HeaderLen + 1
			if len(in) < proofAt+len(hs.Out) || !bytes.Equal(in[proofAt+v:proofAt+len(hs.Out)], hs.Out[v:]) {
				t.Fatalf("authenticated by a proof that is not the honest peer's")
			}
		}
	})
}
