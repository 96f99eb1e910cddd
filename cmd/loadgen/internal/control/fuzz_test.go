package control

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"testing"
)

// FuzzDecode feeds arbitrary bytes to the receiving side: lines read
// through a 16-byte buffer (so lines arrive split at every offset) with a
// small limit, each decoded. Nothing panics; every error is one the
// package documents; no line exceeds the limit; and what decodes encodes
// to a line that decodes to the same message (compared by its encoding,
// since JSON's spelling of a value is not unique).
func FuzzDecode(f *testing.F) {
	var all []byte
	for _, m := range everyKind() {
		b, err := Append(nil, m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		all = append(all, b...)
	}
	f.Add(all)
	for _, s := range []string{"", "\n", "not json\n", "{}\n", `{"type":"hello"}` + "\n", `{"type":"plan"}` + "\n",
		`{"type":"by`, `{"type":"bye"} x` + "\n", `{"type":"collect","epochs":[1e3]}` + "\n"} {
		f.Add([]byte(s))
	}
	const limit = 4 << 10
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bufio.NewReaderSize(bytes.NewReader(data), 16)
		for {
			line, err := ReadLine(r, limit)
			if err != nil {
				if !errors.Is(err, io.EOF) && !errors.Is(err, ErrTruncated) && !errors.Is(err, ErrLineTooLong) {
					t.Fatalf("ReadLine: undocumented error %v", err)
				}
				return
			}
			if len(line) > limit || bytes.IndexByte(line, '\n') >= 0 {
				t.Fatalf("ReadLine returned %d bytes with a newline or over the limit", len(line))
			}
			m, err := Decode(line)
			if err != nil {
				if !IsBadInput(err) {
					t.Fatalf("Decode: undocumented error %v", err)
				}
				continue
			}
			b, err := Append(nil, m)
			if err != nil {
				t.Fatalf("Append refuses what Decode accepted (%q): %v", line, err)
			}
			m2, err := Decode(b[:len(b)-1])
			if err != nil {
				t.Fatalf("Decode refuses what Append wrote (%q): %v", b, err)
			}
			b2, _ := Append(nil, m2)
			if !bytes.Equal(b, b2) {
				t.Fatalf("%q decodes to a message that encodes as %q, then as %q", line, b, b2)
			}
		}
	})
}
