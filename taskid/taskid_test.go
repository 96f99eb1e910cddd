package taskid

import (
	"bytes"
	"errors"
	"math"
	"strings"
	"testing"
)

var sampleIDs = []ID{
	{},
	{Processor: 3, Index: 17},
	{Processor: 127, Index: 128},
	{Processor: 16384, Index: 2097151},
	{Processor: math.MaxUint32, Index: math.MaxUint32},
}

func TestStringAndParseRoundTrip(t *testing.T) {
	for _, id := range sampleIDs {
		got, err := Parse(id.String())
		if err != nil || got != id {
			t.Errorf("Parse(%q) = %v, %v; want %v", id.String(), got, err, id)
		}
	}
	if s := (ID{Processor: 3, Index: 17}).String(); s != "3.17" {
		t.Errorf("String() = %q, want 3.17", s)
	}
}

func TestParseRejects(t *testing.T) {
	for _, s := range []string{
		"", "3", "3.", ".17", "a.b", "3.x", "-1.2", "1.-2", "1.2.3", " 1.2", "1.2 ", "4294967296.0", "0.4294967296", "0x10.1",
	} {
		if id, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) = %v, want an error", s, id)
		}
	}
}

func TestAppendDecodeRoundTrip(t *testing.T) {
	for _, id := range sampleIDs {
		b := Append([]byte{0xee}, id)[1:]
		if len(b) != EncodedLen(id) || len(b) > MaxEncodedLen {
			t.Errorf("%v: Append wrote %d bytes, EncodedLen says %d (max %d)", id, len(b), EncodedLen(id), MaxEncodedLen)
		}
		got, n, err := Decode(append(b, 0xff, 0xff)) // followed by bytes of something else
		if err != nil || got != id || n != len(b) {
			t.Errorf("Decode(Append(%v)) = %v, %d, %v; want %v, %d, nil", id, got, n, err, id, len(b))
		}
	}
	if b := Append(nil, ID{Processor: 3, Index: 17}); !bytes.Equal(b, []byte{3, 17}) {
		t.Errorf("3.17 encodes as %x, want 0311", b)
	}
}

func TestDecodeOfEveryProperPrefixIsShort(t *testing.T) {
	for _, id := range sampleIDs {
		b := Append(nil, id)
		for k := range len(b) {
			if _, n, err := Decode(b[:k]); !errors.Is(err, ErrShort) || n != 0 {
				t.Errorf("%v: Decode of %d of %d bytes = %d, %v; want 0, ErrShort", id, k, len(b), n, err)
			}
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	cases := []struct {
		name string
		in   []byte
		want error
	}{
		{"a processor of 2^32", []byte{0x80, 0x80, 0x80, 0x80, 0x10, 0}, ErrOverflow},
		{"an index whose fifth byte carries more than 4 bits", []byte{0, 0xff, 0xff, 0xff, 0xff, 0x1f}, ErrOverflow},
		{"a processor of six bytes", []byte{0x80, 0x80, 0x80, 0x80, 0x80, 0x00, 0}, ErrOverflow},
		{"a processor written as 80 00 instead of 00", []byte{0x80, 0x00, 0}, ErrOverflow},
		{"an index with a trailing zero group", []byte{0, 0x81, 0x80, 0x00}, ErrOverflow},
		{"an empty input", nil, ErrShort},
		{"a processor without an index", []byte{5}, ErrShort},
		{"an index cut inside its varint", []byte{5, 0x80}, ErrShort},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if id, n, err := Decode(tc.in); !errors.Is(err, tc.want) || n != 0 {
				t.Fatalf("Decode(%x) = %v, %d, %v; want 0 and %v", tc.in, id, n, err, tc.want)
			}
		})
	}
	// The largest value is accepted: ff ff ff ff 0f.
	if id, n, err := Decode([]byte{0xff, 0xff, 0xff, 0xff, 0x0f, 0}); err != nil || n != 6 || id.Processor != math.MaxUint32 {
		t.Fatalf("the largest processor: %v, %d, %v", id, n, err)
	}
}

func FuzzTaskID(f *testing.F) {
	for _, id := range sampleIDs {
		b := Append(nil, id)
		for k := range len(b) + 1 {
			f.Add(b[:k])
		}
	}
	f.Add([]byte{0x80, 0x00, 0x00})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x1f, 0x00})
	f.Fuzz(func(t *testing.T, in []byte) {
		id, n, err := Decode(in)
		if n < 0 || n > len(in) {
			t.Fatalf("consumed %d of %d bytes", n, len(in))
		}
		if err != nil {
			if n != 0 || !(errors.Is(err, ErrShort) || errors.Is(err, ErrOverflow)) {
				t.Fatalf("n=%d, err=%v", n, err)
			}
			return
		}
		if again := Append(nil, id); !bytes.Equal(again, in[:n]) {
			t.Fatalf("Append(%v) = %x, the decoded bytes were %x", id, again, in[:n])
		}
		if back, err := Parse(id.String()); err != nil || back != id {
			t.Fatalf("Parse(%q) = %v, %v", id.String(), back, err)
		}
		// Every prefix of the decoded bytes is short.
		for k := range n {
			if _, pn, perr := Decode(in[:k]); !errors.Is(perr, ErrShort) || pn != 0 {
				t.Fatalf("prefix of %d bytes: %d, %v", k, pn, perr)
			}
		}
	})
}

// FuzzParse: a task name from outside (a control request naming the task
// to crash, a flag) either fails or names an ID whose String parses back to
// it.
func FuzzParse(f *testing.F) {
	for _, id := range sampleIDs {
		f.Add(id.String())
	}
	for _, s := range []string{"", ".", "1.", ".2", "1.2.3", "-1.2", "4294967296.0", "0.4294967295", " 1.2", "01.2"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		id, err := Parse(s)
		if err != nil {
			if !strings.Contains(err.Error(), "taskid:") {
				t.Fatalf("Parse(%q): an error that does not say where it comes from: %v", s, err)
			}
			return
		}
		if back, err := Parse(id.String()); err != nil || back != id {
			t.Fatalf("Parse(%q) = %v, whose String %q parses as %v, %v", s, id, id.String(), back, err)
		}
	})
}
