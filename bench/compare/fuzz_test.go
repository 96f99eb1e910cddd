package main

import (
	"errors"
	"testing"
)

// FuzzParseMsgs reads a packed stream (tcp, grpc-packed) as its reader does:
// parse what arrived, keep the incomplete tail for the next read. Whatever
// the bytes and wherever the read boundary falls: no panic; the messages
// counted use exactly 4+size bytes each, in sequence; a refusal is a
// wrong length or a sequence error; and reading in two parts finds what
// reading at once finds.
func FuzzParseMsgs(f *testing.F) {
	payload := make([]byte, 10)
	var good []byte
	for seq := range uint64(3) {
		good = appendMsg(good, payload, seq)
	}
	f.Add(good, uint16(10), uint16(5))
	f.Add(good, uint16(10), uint16(14))
	f.Add(good[:20], uint16(10), uint16(0))
	f.Add(appendMsg(nil, make([]byte, 3), 0), uint16(3), uint16(1))
	f.Add(appendMsg(appendMsg(nil, nil, 0), nil, 1), uint16(0), uint16(4))
	f.Add(appendMsg(good, payload, 7), uint16(10), uint16(30))
	f.Fuzz(func(t *testing.T, b []byte, size, cut uint16) {
		whole := &checker{size: int(size)}
		msgs, used, err := parseMsgs(b, whole)
		check := func(msgs int64, used int, err error, n int) {
			if used < 0 || used > n || int64(used) != msgs*int64(4+int(size)) {
				t.Fatalf("%d messages of %d bytes used %d of %d bytes", msgs, size, used, n)
			}
			var se *seqError
			if err != nil && !errors.Is(err, errWrongLength) && !errors.As(err, &se) {
				t.Fatalf("an error of no known kind: %v", err)
			}
			if err == nil && n-used >= 4+int(size) {
				t.Fatalf("left a whole message: %d of %d bytes used", used, n)
			}
		}
		check(msgs, used, err, len(b))
		if whole.next != uint64(msgs) {
			t.Fatalf("counted %d messages, the checker %d", msgs, whole.next)
		}

		k := int(cut) % (len(b) + 1)
		split := &checker{size: int(size)}
		m1, u1, err1 := parseMsgs(b[:k], split)
		check(m1, u1, err1, k)
		if err1 != nil {
			if err == nil || m1 != msgs {
				t.Fatalf("the first %d bytes fail after %d messages (%v), all %d after %d (%v)", k, m1, err1, len(b), msgs, err)
			}
			return
		}
		m2, u2, err2 := parseMsgs(b[u1:], split)
		if m1+m2 != msgs || u1+u2 != used || (err2 == nil) != (err == nil) {
			t.Fatalf("in two parts at %d: %d+%d messages, %d+%d bytes, %v; at once: %d, %d, %v", k, m1, m2, u1, u2, err2, msgs, used, err)
		}
	})
}
