package engine

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func TestDecodeMessageRefusesWhatNoEngineSends(t *testing.T) {
	for _, b := range [][]byte{
		nil,                            // no key length at all
		{0x80},                         // a key length cut short
		{0x05, 'a', 'b'},               // a key longer than the message
		{0x81, 0x01},                   // 129 bytes of key in an empty rest
		bytes.Repeat([]byte{0xff}, 11), // a key length that overflows 64 bits
	} {
		if m, err := decodeMessage(7, b); !errors.Is(err, ErrMalformed) {
			t.Errorf("decodeMessage(%x) = %+v, %v; want ErrMalformed", b, m, err)
		}
	}
}

func TestDecodeMessageInvertsAppendEncoded(t *testing.T) {
	for _, c := range []struct{ key, payload []byte }{
		{nil, nil},
		{nil, []byte("payload")},
		{[]byte("k"), nil},
		{[]byte("key"), []byte("payload")},
		{bytes.Repeat([]byte("k"), 300), []byte{0}}, // a two-byte key length
	} {
		b := appendEncoded(nil, c.key, c.payload)
		m, err := decodeMessage(42, b)
		if err != nil {
			t.Fatalf("decodeMessage(appendEncoded(%q, %q)): %v", c.key, c.payload, err)
		}
		if m.Ts != 42 || !bytes.Equal(m.Key, c.key) || !bytes.Equal(m.Payload, c.payload) {
			t.Errorf("decoded %+v, want key %q payload %q at 42", m, c.key, c.payload)
		}
	}
}

// FuzzDecodeMessage: whatever a peer sends either fails as ErrMalformed or
// decodes into a key and payload that cover the input exactly and that
// encode back to the same message; and a task that appends to the key it
// was given cannot write over the payload.
func FuzzDecodeMessage(f *testing.F) {
	f.Add([]byte{})
	f.Add(appendEncoded(nil, []byte("key"), []byte("payload")))
	f.Add(appendEncoded(nil, nil, []byte("payload")))
	f.Add([]byte{0x80, 0x00, 'p'}) // a key length of zero written in two bytes
	f.Add([]byte{0x05, 'a'})
	f.Fuzz(func(t *testing.T, b []byte) {
		in := bytes.Clone(b)
		m, err := decodeMessage(-3, b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("failed with an error of no known kind: %v", err)
			}
			if n, k := binary.Uvarint(b); k > 0 && n <= uint64(len(b)-k) {
				t.Fatalf("refused %x, whose key length %d fits", b, n)
			}
			return
		}
		if m.Ts != -3 {
			t.Fatalf("timestamp %d, want -3", m.Ts)
		}
		_, k := binary.Uvarint(b)
		if k+len(m.Key)+len(m.Payload) != len(b) || !bytes.Equal(append(bytes.Clone(m.Key), m.Payload...), b[k:]) {
			t.Fatalf("%x decoded as key %x payload %x", b, m.Key, m.Payload)
		}
		again, err := decodeMessage(-3, appendEncoded(nil, m.Key, m.Payload))
		if err != nil || !bytes.Equal(again.Key, m.Key) || !bytes.Equal(again.Payload, m.Payload) {
			t.Fatalf("re-encoded %+v decodes as %+v, %v", m, again, err)
		}
		payload := bytes.Clone(m.Payload)
		_ = append(m.Key, 0xAA, 0xBB, 0xCC)
		if !bytes.Equal(m.Payload, payload) || !bytes.Equal(b, in) {
			t.Fatalf("appending to the key wrote over the payload: %x, was %x", m.Payload, payload)
		}
	})
}
