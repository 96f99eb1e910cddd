package main

import (
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"
)

// FuzzControlMessages decodes arbitrary bytes as each of the messages
// loadgen's processes read from one another: serve's report requests
// (onControl) and send's findings (the reply handler), a bench host's side
// requests (benchPeerCmd) and its answers (childHost.call). Whatever the
// bytes: no panic; a refusal says what was malformed, wraps the JSON
// error and is short; what decodes encodes and decodes again to the same;
// a side request's count is accepted only within 1 to maxCount; and
// findings' latency imports or is refused with errBadLatency.
func FuzzControlMessages(f *testing.F) {
	for _, s := range []string{
		`{"epoch":12345,"reply_to":"127.0.0.1:7000"}`,
		`{"delivered":10,"duplicates":1,"gaps":2,"malformed":3,"bytes":1000,"latency":{"LowestTrackableValue":1,"HighestTrackableValue":60000000000,"SignificantFigures":3,"Counts":[0,1,2]}}`,
		`{"delivered":1,"latency":null}`,
		`{"op":"start","kind":"tcp-packed","backend":"net","size":100,"count":3,"every":8}`,
		`{"op":"start","kind":"node-echo","reply_to":"127.0.0.1:1","count":-1}`,
		`{"op":"finish"}`,
		`{"addr":"127.0.0.1:9","pid":42,"delivery":{},"err":"x"}`,
		`{"pid":1,"delivery":{"Received":5},"latency":{"Counts":[]}}`,
		`{"epoch":-1}`,
		`{"count":1e400}`,
		`null`,
		`[]`,
		`{"op":`,
		"\xff",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if req, err := parseReportRequest(b); err != nil {
			checkDecodeErr(t, err, "a malformed report request: ")
		} else {
			roundTrip(t, req, parseReportRequest)
		}

		if fd, err := parseFindings(b); err != nil {
			checkDecodeErr(t, err, "malformed findings: ")
		} else {
			roundTrip(t, fd, parseFindings)
			if fd.Latency != nil {
				if _, err := importLatency(fd.Latency); err != nil && !errors.Is(err, errBadLatency) {
					t.Fatalf("the findings' latency is refused with %v, want errBadLatency", err)
				}
			}
		}

		if spec, err := parseSideSpec(b); err != nil {
			checkDecodeErr(t, err, "bench: a malformed side request: ")
		} else {
			roundTrip(t, spec, parseSideSpec)
			n, err := spec.count()
			switch {
			case err != nil && (spec.Count >= 1 && spec.Count <= maxCount || spec.Count == 0):
				t.Fatalf("a count of %d refused: %v", spec.Count, err)
			case err != nil && !strings.Contains(err.Error(), "want 1 to"):
				t.Fatalf("a count of %d refused with %q, which does not say what is allowed", spec.Count, err)
			case err == nil && (n < 1 || n > maxCount):
				t.Fatalf("a count of %d taken as %d", spec.Count, n)
			}
		}

		if r, err := parseSideReply(b); err != nil {
			checkDecodeErr(t, err, "a malformed answer: ")
		} else {
			roundTrip(t, r, parseSideReply)
		}
	})
}

// checkDecodeErr checks a decoder's refusal: it starts with prefix, which
// says what was malformed, wraps the JSON decoder's error, and is short
// whatever the input.
func checkDecodeErr(t *testing.T, err error, prefix string) {
	t.Helper()
	msg := err.Error()
	if !strings.HasPrefix(msg, prefix) {
		t.Fatalf("refused with %q, want it to start %q", msg, prefix)
	}
	var syn *json.SyntaxError
	var typ *json.UnmarshalTypeError
	if !errors.As(err, &syn) && !errors.As(err, &typ) && !strings.Contains(msg, "unexpected end of JSON input") {
		t.Fatalf("refused with %q (%T), which wraps no JSON error", msg, errors.Unwrap(err))
	}
	if len(msg) > 512 {
		t.Fatalf("refused with an error of %d bytes: %.200q", len(msg), msg)
	}
}

// roundTrip checks that v encodes to JSON that parse decodes to v again.
func roundTrip[T any](t *testing.T, v T, parse func([]byte) (T, error)) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("encoding %+v: %v", v, err)
	}
	back, err := parse(b)
	if err != nil {
		t.Fatalf("%+v encodes as %s, which is refused: %v", v, b, err)
	}
	if !reflect.DeepEqual(v, back) {
		t.Fatalf("%+v encodes as %s, which decodes as %+v", v, b, back)
	}
}
