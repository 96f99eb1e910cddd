package watermill

import (
	"bytes"
	"errors"
	"maps"
	"strings"
	"testing"

	wm "github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
)

func newMsg(id string, payload string, md map[string]string) *message.Message {
	m := message.NewMessage(id, []byte(payload))
	for k, v := range md {
		m.Metadata.Set(k, v)
	}
	return m
}

func sameMessage(t *testing.T, want, got *message.Message) {
	t.Helper()
	if got.UUID != want.UUID {
		t.Fatalf("UUID %q, want %q", got.UUID, want.UUID)
	}
	if !bytes.Equal(got.Payload, want.Payload) {
		t.Fatalf("payload %q, want %q", got.Payload, want.Payload)
	}
	if len(got.Metadata) != len(want.Metadata) || !maps.Equal(got.Metadata, want.Metadata) {
		t.Fatalf("metadata %v, want %v", got.Metadata, want.Metadata)
	}
}

func TestCodecRoundTrips(t *testing.T) {
	for _, tc := range []struct {
		name string
		msg  *message.Message
		size int // the encoding's length, counted by hand
	}{
		{"a canonical UUID is packed into 16 bytes", newMsg("6ba7b810-9dad-11d1-80b4-00c04fd430c8", "x", nil), 1 + 16 + 1 + 1},
		{"an uppercase UUID travels as a string", newMsg("6BA7B810-9DAD-11D1-80B4-00C04FD430C8", "", nil), 1 + 1 + 36 + 1},
		{"any other id travels as a string", newMsg("order-17", "p", nil), 1 + 1 + 8 + 1 + 1},
		{"an empty id", newMsg("", "", nil), 1 + 1 + 1},
		{"metadata in key order", newMsg("m", "body", map[string]string{"b": "2", "a": "1", "": "empty key"}),
			1 + 2 + 1 + (1 + 0 + 1 + 9) + (1 + 1 + 1 + 1) + (1 + 1 + 1 + 1) + 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := AppendMessage(nil, tc.msg)
			if len(b) != tc.size {
				t.Fatalf("encoding is %d bytes, want %d: %x", len(b), tc.size, b)
			}
			got, err := DecodeMessage(b)
			if err != nil {
				t.Fatal(err)
			}
			sameMessage(t, tc.msg, got)
			if again := AppendMessage(nil, got); !bytes.Equal(again, b) {
				t.Fatalf("re-encoding differs: %x, first %x", again, b)
			}
		})
	}
}

func TestCodecCopiesFromTheInput(t *testing.T) {
	b := AppendMessage(nil, newMsg("id-1", "payload", map[string]string{"k": "v"}))
	got, err := DecodeMessage(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 0xff
	}
	sameMessage(t, newMsg("id-1", "payload", map[string]string{"k": "v"}), got)
}

func TestCodecRefusesMalformedInput(t *testing.T) {
	good := AppendMessage(nil, newMsg("id", "", map[string]string{"a": "1", "b": "2"}))
	for _, tc := range []struct {
		name  string
		in    []byte
		want  error
		field string
	}{
		{"empty input", nil, ErrTruncated, "flags"},
		{"reserved flag bits", []byte{0x02, 0, 0}, ErrReservedFlags, "flags"},
		{"a packed UUID cut short", []byte{1, 1, 2, 3}, ErrTruncated, "uuid"},
		{"an id longer than the input", []byte{0, 5, 'a'}, ErrTooLong, "uuid"},
		{"a varint that overflows", append(append([]byte{0}, bytes.Repeat([]byte{0xff}, 10)...), 1), ErrVarint, "uuid"},
		{"a varint not in its shortest form", []byte{0, 0x80, 0x00, 0}, ErrVarint, "uuid"},
		{"a canonical UUID written as a string", append(append([]byte{0, 36}, "6ba7b810-9dad-11d1-80b4-00c04fd430c8"...), 0), ErrUnpackedUUID, "uuid"},
		{"no metadata count", []byte{0, 0}, ErrTruncated, "metadata count"},
		{"a metadata count the rest cannot hold", []byte{0, 0, 3, 0, 0, 0, 0}, ErrTooLong, "metadata count"},
		{"a repeated key", []byte{0, 0, 2, 1, 'a', 0, 1, 'a', 0}, ErrKeyOrder, "metadata key"},
		{"keys out of order", []byte{0, 0, 2, 1, 'b', 0, 1, 'a', 0}, ErrKeyOrder, "metadata key"},
		{"a value cut short", good[:len(good)-1], ErrTooLong, "metadata value"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeMessage(tc.in)
			var de *DecodeError
			if !errors.As(err, &de) || !errors.Is(err, tc.want) {
				t.Fatalf("error %v, want a *DecodeError wrapping %v", err, tc.want)
			}
			if de.Field != tc.field {
				t.Fatalf("field %q, want %q (%v)", de.Field, tc.field, err)
			}
			if !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("error %q does not name the field", err)
			}
		})
	}
}

func BenchmarkCodec(b *testing.B) {
	msg := newMsg(wm.NewUUID(), strings.Repeat("x", 100), map[string]string{"trace": wm.NewUUID()})
	buf := AppendMessage(nil, msg)
	b.ReportAllocs()
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		buf = AppendMessage(buf[:0], msg)
		if _, err := DecodeMessage(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzDecodeMessage checks that DecodeMessage never panics, that what it
// accepts re-encodes to exactly its input (the encoding is canonical), and
// that what it refuses it refuses with a *DecodeError.
func FuzzDecodeMessage(f *testing.F) {
	for _, m := range []*message.Message{
		newMsg(wm.NewUUID(), "payload", map[string]string{"k": "v", "trace": wm.NewUUID()}),
		newMsg("not-a-uuid", "", nil),
		newMsg("6BA7B810-9DAD-11D1-80B4-00C04FD430C8", "\x00\x01", map[string]string{"": ""}),
		newMsg(wm.NewUUID(), strings.Repeat("y", 300), map[string]string{strings.Repeat("k", 200): "v"}),
	} {
		b := AppendMessage(nil, m)
		f.Add(b)
		for _, cut := range []int{1, 2, len(b) / 2, len(b) - 1} {
			f.Add(b[:cut])
		}
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		msg, err := DecodeMessage(in)
		if err != nil {
			var de *DecodeError
			if !errors.As(err, &de) || de.Offset < 0 || de.Offset > len(in) {
				t.Fatalf("refused with %v (%T)", err, err)
			}
			return
		}
		if out := AppendMessage(nil, msg); !bytes.Equal(out, in) {
			t.Fatalf("accepted %x but re-encodes to %x", in, out)
		}
	})
}
