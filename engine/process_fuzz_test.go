package engine

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
)

// FuzzWorkerLines feeds the coordinator's reading of a worker's stdout
// (readHello, then readResponse until the lines end, as processHandle's
// restart and read do) arbitrary output, read with a line limit of 64 B to
// 4 KiB in place of maxWorkerLine. Whatever the output: no panic; the
// hello is taken only from a JSON line that names an address; each line
// after it is taken exactly when it decodes as a Response, and is not
// longer than the limit; a line over the limit ends the reading with an
// error that says so, never a line the limit leaves room for; every
// refusal names the node and is short, however long the line; and a
// decoded response round-trips through JSON.
func FuzzWorkerLines(f *testing.F) {
	for _, s := range []string{
		`{"addr":"127.0.0.1:9"}`,
		`{"addr":"127.0.0.1:9"}` + "\n" + `{"id":1,"clock":{"gen":1,"min":5,"crashes":0,"processed":7,"late":0,"filtered":0,"wire_bytes":100},"faults":{"drop":1}}` + "\n",
		`{"addr":"a"}` + "\r\n" + `{"id":0,"faults":{},"event":{"gen":2,"task":"1.0","err":"boom"}}` + "\r\n" + `{"id":3,"err":"x","log_lost":true}`,
		`{"addr":"a"}` + "\n" + `{"id":4,"results":{"0.0":"aGVsbG8=","1.0":null},"faults":{}}` + "\n" + `{"id":5,"latest_ts":9,"latest_ok":true,"common":[3,2,1],"faults":{}}`,
		`{"addr":"a"}` + "\n" + `{"id":1,"results":{},"common":[],"faults":{"partition_ns":-1}}`,
		`{"addr":"a"}` + "\n" + `panic: runtime error` + "\n" + `{"id":2}`,
		`{"addr":"a"}` + "\n" + `{"id":1,"err":`,
		`{"addr":"a"}` + "\n" + `{"id":"1"}`,
		`{"addr":"a"}` + "\n\n",
		`{"addr":"a"}` + "\n" + `{"id":1,"err":"` + strings.Repeat("\xff", 300) + `"}`,
		`{"addr":""}`,
		`not a hello` + "\n" + `{"addr":"a"}`,
		strings.Repeat("x", 300),
		"",
	} {
		f.Add([]byte(s), uint16(100))
	}
	f.Fuzz(func(t *testing.T, in []byte, limitSeed uint16) {
		const node = 3
		limit := 64 + int(limitSeed)%(4<<10)
		lines, last := splitLines(in)
		sc := newLineScanner(bytes.NewReader(in), limit)

		addr, err := readHello(sc, node)
		if err != nil {
			checkRefusal(t, "the hello's refusal", err.Error())
			if len(lines) > 0 && fits(lines[0], last == 0, limit) && helloAddr(lines[0]) != "" {
				t.Fatalf("the hello %q was refused: %v", lines[0], err)
			}
			if len(lines) > 0 && len(lines[0]) > limit && !strings.Contains(err.Error(), bufio.ErrTooLong.Error()) {
				t.Fatalf("a hello of %d bytes, over the limit of %d, was refused with %v, which does not say so", len(lines[0]), limit, err)
			}
			return
		}
		if len(lines) == 0 || len(lines[0]) > limit || addr != helloAddr(lines[0]) {
			t.Fatalf("hello %q from the output %q (limit %d)", addr, in, limit)
		}

		for i := 1; ; i++ {
			r, ok, broke := readResponse(sc, node)
			if !ok {
				if i == len(lines) {
					if broke != "" {
						t.Fatalf("the output's %d lines were read, then: %s", len(lines), broke)
					}
					return
				}
				if i > len(lines) {
					t.Fatalf("line %d read of %d", i, len(lines))
				}
				line := lines[i]
				checkRefusal(t, fmt.Sprintf("the refusal of line %d", i), broke)
				switch {
				case strings.Contains(broke, bufio.ErrTooLong.Error()):
					if fits(line, i == last, limit) {
						t.Fatalf("line %d, %d bytes, was refused as too long with a limit of %d: %s", i, len(line), limit, broke)
					}
				case len(line) > limit:
					t.Fatalf("line %d, %d bytes, over the limit of %d, was refused with %q, which does not say it is too long", i, len(line), limit, broke)
				case strings.Contains(broke, "broke the control protocol"):
					if json.Unmarshal(line, new(Response)) == nil {
						t.Fatalf("line %d %q is a response, yet it was refused: %s", i, line, broke)
					}
				default:
					t.Fatalf("line %d %q was refused with %q", i, line, broke)
				}
				return
			}
			if i >= len(lines) {
				t.Fatalf("response %d read from an output of %d lines", i, len(lines))
			}
			if len(lines[i]) > limit {
				t.Fatalf("line %d, %d bytes, over the limit of %d, was read", i, len(lines[i]), limit)
			}
			var want Response
			if err := json.Unmarshal(lines[i], &want); err != nil {
				t.Fatalf("line %d %q was read as %+v, though it does not decode: %v", i, lines[i], r, err)
			}
			if !reflect.DeepEqual(r, want) {
				t.Fatalf("line %d %q was read as %+v, want %+v", i, lines[i], r, want)
			}
			checkRoundTrip(t, r)
		}
	})
}

// splitLines splits out as bufio.ScanLines does: at each newline, a
// carriage return before it dropped, and a last line without a newline
// kept if it is not empty. last is the index of that last line, or -1 if
// every line ends with a newline.
func splitLines(out []byte) (lines [][]byte, last int) {
	last = -1
	for len(out) > 0 {
		i := bytes.IndexByte(out, '\n')
		if i < 0 {
			last = len(lines)
			lines = append(lines, bytes.TrimSuffix(out, []byte("\r")))
			break
		}
		lines = append(lines, bytes.TrimSuffix(out[:i], []byte("\r")))
		out = out[i+1:]
	}
	return lines, last
}

// fits reports whether a line surely fits a scanner's limit: with its
// carriage return and newline, if it is not the last line, and with room
// for the scanner to see the end of its input after it, if it is.
func fits(line []byte, isLast bool, limit int) bool {
	if isLast {
		return len(line)+2 < limit
	}
	return len(line)+2 <= limit
}

// helloAddr is the address a hello line names, "" if it is not a hello.
func helloAddr(line []byte) string {
	var r Response
	if json.Unmarshal(line, &r) != nil {
		return ""
	}
	return r.Addr
}

// checkRefusal checks a reason the coordinator gives for refusing a
// worker's output: it names the node, and it is short whatever the line.
func checkRefusal(t *testing.T, what, msg string) {
	t.Helper()
	if !strings.Contains(msg, "node 3") {
		t.Fatalf("%s does not name the node: %q", what, msg)
	}
	if len(msg) > 4<<10 { // a quote of 200 characters takes at most 2,000 bytes
		t.Fatalf("%s is %d bytes long: %.300q...", what, len(msg), msg)
	}
}

// checkRoundTrip checks that r encodes to JSON that decodes to r again,
// and encodes the same: what a worker writes, the coordinator reads. An
// empty map or list reads back as none, which omitempty leaves out.
func checkRoundTrip(t *testing.T, r Response) {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatalf("encoding %+v: %v", r, err)
	}
	var back Response
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("decoding %s: %v", b, err)
	}
	if len(r.Results) == 0 {
		r.Results = nil
	}
	if len(r.Common) == 0 {
		r.Common = nil
	}
	if !reflect.DeepEqual(r, back) {
		t.Fatalf("%+v encodes as %s, which decodes as %+v", r, b, back)
	}
	if b2, err := json.Marshal(back); err != nil || !bytes.Equal(b, b2) {
		t.Fatalf("%s decodes to a response that encodes as %s (%v)", b, b2, err)
	}
}
