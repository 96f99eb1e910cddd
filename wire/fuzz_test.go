package wire

import (
	"bytes"
	"errors"
	"testing"
)

// validFrames is every round-trip case encoded, the fuzz targets' seeds.
func validFrames() [][]byte {
	var out [][]byte
	for _, tc := range roundTripCases() {
		out = append(out, appendValue(nil, tc.v))
	}
	return out
}

func FuzzDecodePreface(f *testing.F) {
	good := AppendPreface(nil, Preface{Flags: FlagCompression | FlagAuth, NodeID: 0x0102030405060708})
	for k := range len(good) + 1 {
		f.Add(good[:k])
	}
	f.Add(append(bytes.Clone(good), "more"...))
	f.Add([]byte("SLCE\x02\x00\x00\x00"))
	f.Add([]byte("GET / HTTP/1.1\r\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		p, n, err := DecodePreface(in)
		if n < 0 || n > len(in) {
			t.Fatalf("consumed %d of %d bytes", n, len(in))
		}
		if err != nil {
			if n != 0 || sentinelOf(err) == nil {
				t.Fatalf("failed with n=%d and an error of no known kind: %v", n, err)
			}
			if err == ErrNeedMore && len(in) >= PrefaceLen {
				t.Fatalf("needs more with %d bytes", len(in))
			}
		} else {
			if n != PrefaceLen {
				t.Fatalf("succeeded consuming %d bytes", n)
			}
			if again := AppendPreface(nil, p); !bytes.Equal(again, in[:n]) {
				t.Fatalf("re-encoding %+v gives %x, want %x", p, again, in[:n])
			}
		}
		// Every prefix agrees: it needs more, or fails the same way.
		for k := range min(len(in), PrefaceLen) {
			_, pn, perr := DecodePreface(in[:k])
			if pn != 0 || perr == nil {
				t.Fatalf("prefix of %d bytes: n=%d err=%v", k, pn, perr)
			}
			if perr != ErrNeedMore && sentinelOf(perr) != sentinelOf(err) {
				t.Fatalf("prefix of %d bytes fails with %v, the whole with %v", k, perr, err)
			}
		}
	})
}

// checkBody parses a decoded frame's body and, when it parses, checks that
// re-encoding reproduces the frame byte for byte: every accepted body is
// canonical.
func checkBody(t *testing.T, f Frame, whole []byte) {
	t.Helper()
	v, err := parseFrame(f)
	if err != nil {
		if sentinelOf(err) == nil {
			t.Fatalf("%v body fails with an error of no known kind: %v", f.Type, err)
		}
		var fe *FrameError
		if !errors.As(err, &fe) || fe.Offset < 0 || fe.Offset > len(f.Body) {
			t.Fatalf("%v body fault is not a *FrameError inside the body: %v", f.Type, err)
		}
		return
	}
	var again []byte
	switch f.Type {
	case FrameData:
		again = appendValue(nil, v) // carries the flags
	default:
		again = AppendFrame(nil, f.Type, f.Flags, appendValue(nil, v)[HeaderLen:])
	}
	if !bytes.Equal(again, whole) {
		t.Fatalf("re-encoding the %v frame gives\n%x\nwant\n%x", f.Type, again, whole)
	}
	if f.Type == FrameData {
		whole, err := readRunsWhole(f.Body)
		if err != nil {
			t.Fatalf("NextMessage accepted the body, ReadRun says %v", err)
		}
		if err := sameRuns(whole, v.(batch).Runs); err != nil {
			t.Fatalf("ReadRun disagrees with NextMessage: %v", err)
		}
	}
}

func FuzzDecodeFrame(f *testing.F) {
	frames := validFrames()
	for _, fr := range frames {
		for cut := range len(fr) + 1 {
			f.Add(fr, cut)
		}
	}
	f.Add(bytes.Join(frames, nil), 17)
	for _, fr := range frames { // as type byte + body, for the body parsers
		f.Add(append([]byte{fr[0]}, fr[HeaderLen:]...), 0)
	}
	f.Fuzz(func(t *testing.T, in []byte, cut int) {
		const maxBody = 1 << 16
		// Feed a prefix, then the whole input.
		if cut < 0 {
			cut = -cut
		}
		if len(in) > 0 {
			cut %= len(in) + 1
		} else {
			cut = 0
		}
		whole, n, err := DecodeFrame(in, maxBody)
		if n < 0 || n > len(in) {
			t.Fatalf("consumed %d of %d bytes", n, len(in))
		}
		part, pn, perr := DecodeFrame(in[:cut], maxBody)
		switch {
		case err == nil && cut >= n:
			if perr != nil || pn != n || part.Type != whole.Type || part.Flags != whole.Flags || !bytes.Equal(part.Body, whole.Body) {
				t.Fatalf("a %d-byte prefix holding the whole %d-byte frame decodes differently: %d, %v", cut, n, pn, perr)
			}
		case perr == nil:
			t.Fatalf("a %d-byte prefix decodes a %d-byte frame, the whole input gives %d, %v", cut, pn, n, err)
		case perr != ErrNeedMore && sentinelOf(perr) != sentinelOf(err):
			t.Fatalf("a %d-byte prefix fails with %v, the whole input with %v", cut, perr, err)
		case perr == ErrNeedMore && pn != 0:
			t.Fatalf("needs more but consumed %d", pn)
		}
		// The CRC keeps most mutations from reaching the body parsers, so
		// also read the input as a type byte and a body, and frame that.
		if len(in) > 0 && FrameType(in[0]).Known() {
			framed := AppendFrame(nil, FrameType(in[0]), 0, in[1:])
			fr, n, err := DecodeFrame(framed, maxBody)
			if err == nil && n == len(framed) {
				checkBody(t, fr, framed)
			}
		}
		// Then walk the whole input as a stream of frames.
		for len(in) > 0 {
			fr, n, err := DecodeFrame(in, maxBody)
			if err != nil {
				if n != 0 || sentinelOf(err) == nil {
					t.Fatalf("failed with n=%d and an error of no known kind: %v", n, err)
				}
				if err == ErrNeedMore {
					h, herr := DecodeHeader(in, maxBody)
					if herr == nil && HeaderLen+int(h.Length) <= len(in) {
						t.Fatalf("needs more though all %d bytes of the frame are present", HeaderLen+int(h.Length))
					}
				}
				return
			}
			if n != HeaderLen+len(fr.Body) || n > len(in) {
				t.Fatalf("consumed %d bytes for a %d-byte body of a %d-byte input", n, len(fr.Body), len(in))
			}
			checkBody(t, fr, in[:n])
			in = in[n:]
		}
	})
}

func FuzzDataReader(f *testing.F) {
	for _, fr := range validFrames() {
		if FrameType(fr[0]) == FrameData {
			body := fr[HeaderLen:]
			f.Add(body)
			for cut := range len(body) {
				f.Add(body[:cut])
			}
		}
	}
	f.Add([]byte{1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f, 0})
	f.Fuzz(func(t *testing.T, body []byte) {
		runs, err := readRuns(body)
		whole, werr := readRunsWhole(body)
		if sentinelOf(err) != sentinelOf(werr) {
			t.Fatalf("NextMessage says %v, ReadRun says %v", err, werr)
		}
		if err != nil {
			var fe *FrameError
			if !errors.As(err, &fe) || fe.Type != FrameData || fe.Offset < 0 || fe.Offset > len(body) {
				t.Fatalf("fault is not a *FrameError inside the DATA body: %v", err)
			}
			return
		}
		if err := sameRuns(whole, runs); err != nil {
			t.Fatalf("ReadRun disagrees with NextMessage: %v", err)
		}
		total := 0
		for _, r := range runs {
			for _, m := range r.Msgs {
				total += len(m.Payload)
			}
		}
		if total > len(body) {
			t.Fatalf("%d payload bytes out of a %d-byte body", total, len(body))
		}
		if again := appendValue(nil, batch{Runs: runs})[HeaderLen:]; !bytes.Equal(again, body) {
			t.Fatalf("re-encoding gives\n%x\nwant\n%x", again, body)
		}
	})
}
