package control

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/sluicehq/sluice/bench"
)

func goodPlan() Plan {
	return Plan{Version: Version, Size: 100, Channels: 2, Connections: 1, Messages: 100, Heartbeat: 50 * time.Millisecond}
}

// everyKind is one message of each kind, each with its body.
func everyKind() []Msg {
	p := goodPlan()
	h := hdrhistogram.New(1, 1000, 1) // small: its export is a seed of the fuzz target
	_ = h.RecordValue(123)
	return []Msg{
		{Kind: KindPlan, Plan: &p},
		{Kind: KindReady, Ready: &Ready{DataAddr: "10.0.0.1:7401", Epoch: 1 << 62, Machine: bench.Machine{CPU: "x", Cores: 2}}},
		{Kind: KindConnect, To: "10.0.0.1:7401", Index: 3},
		{Kind: KindConnect}, // a receiver only
		{Kind: KindConnected},
		{Kind: KindStart, StartAt: time.Date(2026, 11, 25, 10, 0, 0, 0, time.UTC).UnixNano()},
		{Kind: KindProgress, Progress: &Progress{Sent: 5, Delivered: 4}},
		{Kind: KindDone, Done: &Done{Sent: 100, Elapsed: time.Second, Late: time.Millisecond, Resent: 2, Err: "x"}},
		{Kind: KindCollect, Epochs: []uint64{1, 1<<64 - 1}},
		{Kind: KindFindings, Findings: &Findings{BySender: map[uint64]Received{1<<64 - 1: {Delivered: 7, Gaps: 1, Latency: h.Export()}}, WireOut: 9}},
		{Kind: KindBye},
		{Kind: KindError, Error: "plan: no"},
		{Kind: KindWorker, Worker: &WorkerPlan{Version: Version, Job: "job-1", Node: 2, Spec: json.RawMessage(`{"kind":"wordcount"}`), Listen: "10.0.0.1:0", Seed: 7, Fsync: true}},
		{Kind: KindStarted, Started: &Started{Pid: 42, Machine: bench.Machine{CPU: "y"}}},
		{Kind: KindKill, Worker: &WorkerPlan{Version: Version, Job: "job-1", Node: 2}},
		{Kind: KindKilled, Started: &Started{Pid: 42}},
		{Kind: KindDrop, Worker: &WorkerPlan{Version: Version, Job: "job-0123456789abcdef"}},
		{Kind: KindDropped},
		{Kind: KindAuth, Nonce: bytes.Repeat([]byte{1}, nonceLen)},
		{Kind: KindProof, MAC: []byte{1, 2, 3}},
	}
}

func TestEveryKindSurvivesTheWire(t *testing.T) {
	msgs := everyKind()
	a, b := net.Pipe()
	tx, rx := NewConn(a), NewConn(b)
	defer tx.Close()
	defer rx.Close()
	go func() {
		for _, m := range msgs {
			if err := tx.Send(m); err != nil {
				t.Error(err)
				return
			}
		}
	}()
	for _, want := range msgs {
		got, err := rx.Recv(5 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("a %q message came out as %+v, want %+v", want.Kind, got, want)
		}
	}
}

func TestReadLine(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		limit   int
		want    string
		wantErr error
	}{
		{"a line comes back without its newline", "{\"type\":\"bye\"}\n", 100, `{"type":"bye"}`, nil},
		{"a line longer than the read buffer is joined", strings.Repeat("x", 40) + "\n", 100, strings.Repeat("x", 40), nil},
		{"a line of exactly the limit is accepted", strings.Repeat("x", 40) + "\n", 40, strings.Repeat("x", 40), nil},
		{"an empty line is a line", "\n", 40, "", nil},
		{"a line over the limit is refused", strings.Repeat("x", 41) + "\n", 40, "", ErrLineTooLong},
		{"a line over the limit is refused before its end arrives", strings.Repeat("x", 41), 40, "", ErrLineTooLong},
		{"a line cut off by the end of the stream is truncated", `{"type":`, 100, "", ErrTruncated},
		{"a truncated line is an unexpected EOF too", `{"type":`, 100, "", io.ErrUnexpectedEOF},
		{"an empty stream is EOF", "", 100, "", io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := bufio.NewReaderSize(strings.NewReader(tt.in), 16)
			got, err := ReadLine(r, tt.limit)
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("error %v, want %v", err, tt.wantErr)
			}
			if string(got) != tt.want {
				t.Errorf("line %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDecodeRefusesWhatIsNotAMessage(t *testing.T) {
	tests := []struct {
		name, line string
		want       error
	}{
		{"not JSON", `not json`, ErrMalformed},
		{"a JSON array", `[1,2]`, ErrMalformed},
		{"JSON null", `null`, ErrMalformed},
		{"an object without a type", `{}`, ErrMalformed},
		{"an empty type", `{"type":""}`, ErrMalformed},
		{"a type that is not a string", `{"type":5}`, ErrMalformed},
		{"a truncated object", `{"type":"bye"`, ErrMalformed},
		{"an object and then more", `{"type":"bye"} {"type":"bye"}`, ErrMalformed},
		{"a body of the wrong shape", `{"type":"plan","plan":[1]}`, ErrMalformed},
		{"a number out of its field's range", `{"type":"collect","epochs":[-1]}`, ErrMalformed},
		{"an unknown kind", `{"type":"hello"}`, ErrUnknownKind},
		{"a kind in the wrong case", `{"type":"PLAN","plan":{}}`, ErrUnknownKind},
		{"a plan without its plan", `{"type":"plan"}`, ErrMalformed},
		{"a plan whose plan is null", `{"type":"plan","plan":null}`, ErrMalformed},
		{"ready without its body", `{"type":"ready"}`, ErrMalformed},
		{"start without a start time", `{"type":"start"}`, ErrMalformed},
		{"start before 1970", `{"type":"start","start_at_unix_ns":-5}`, ErrMalformed},
		{"progress without counters", `{"type":"progress"}`, ErrMalformed},
		{"done without its body", `{"type":"done"}`, ErrMalformed},
		{"findings without their body", `{"type":"findings"}`, ErrMalformed},
		{"an error that says nothing", `{"type":"error"}`, ErrMalformed},
		{"worker without its plan", `{"type":"worker"}`, ErrMalformed},
		{"kill without its plan", `{"type":"kill"}`, ErrMalformed},
		{"started without its body", `{"type":"started"}`, ErrMalformed},
		{"killed without its body", `{"type":"killed"}`, ErrMalformed},
		{"auth without a nonce", `{"type":"auth"}`, ErrMalformed},
		{"proof without a MAC", `{"type":"proof"}`, ErrMalformed},
		{"a MAC that is not base64", `{"type":"proof","mac":"!!"}`, ErrMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, err := Decode([]byte(tt.line))
			if !errors.Is(err, tt.want) {
				t.Fatalf("decoded %+v, error %v; want %v", m, err, tt.want)
			}
			if !IsBadInput(err) {
				t.Errorf("IsBadInput(%v) is false", err)
			}
		})
	}
}

// Decode and Append agree: what one refuses the other refuses, so a Conn
// never writes a line its peer cannot read.
func TestAppendRefusesWhatDecodeRefuses(t *testing.T) {
	for _, m := range []Msg{{}, {Kind: "hello"}, {Kind: KindPlan}, {Kind: KindError}, {Kind: KindStart}} {
		if b, err := Append(nil, m); err == nil || !IsBadInput(err) {
			t.Errorf("Append(%+v) = %q, %v; want a refusal", m, b, err)
		}
	}
	big := Msg{Kind: KindError, Error: strings.Repeat("x", MaxLine)}
	if _, err := Append(nil, big); !errors.Is(err, ErrLineTooLong) {
		t.Errorf("Append of a %d-byte error: %v, want ErrLineTooLong", MaxLine, err)
	}
	for _, m := range everyKind() {
		b, err := Append([]byte("prefix"), m)
		if err != nil {
			t.Fatalf("Append(%q): %v", m.Kind, err)
		}
		if !bytes.HasPrefix(b, []byte("prefix")) || b[len(b)-1] != '\n' || bytes.Count(b, []byte{'\n'}) != 1 {
			t.Errorf("Append(%q) = %q: want the prefix, then one line", m.Kind, b)
		}
	}
}

func TestConnReportsBadInputTruncationAndTimeoutByType(t *testing.T) {
	tests := []struct {
		name, in string
		want     error
	}{
		{"bad JSON", "not json\n", ErrMalformed},
		{"an unknown kind", `{"type":"hello"}` + "\n", ErrUnknownKind},
		{"the peer closes mid-line", `{"type":"by`, ErrTruncated},
		{"the peer closes between lines", "", io.EOF},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, b := net.Pipe()
			go func() { a.Write([]byte(tt.in)); a.Close() }()
			c := NewConn(b)
			defer c.Close()
			if m, err := c.Recv(5 * time.Second); !errors.Is(err, tt.want) {
				t.Errorf("read %+v, error %v; want %v", m, err, tt.want)
			}
		})
	}
	t.Run("a silent peer times out", func(t *testing.T) {
		a, b := net.Pipe()
		defer a.Close()
		c := NewConn(b)
		defer c.Close()
		_, err := c.Recv(10 * time.Millisecond)
		var ne net.Error
		if !errors.Is(err, ErrTimeout) || !errors.As(err, &ne) || !ne.Timeout() {
			t.Fatalf("error %v, want ErrTimeout wrapping the net timeout", err)
		}
		if IsBadInput(err) {
			t.Errorf("a timeout counts as bad input")
		}
	})
}

func TestExpectNamesTheKindGotAndTheKindWanted(t *testing.T) {
	if err := Expect(Msg{Kind: KindPlan}, KindPlan); err != nil {
		t.Fatalf("Expect of the kind wanted: %v", err)
	}
	err := Expect(Msg{Kind: KindStart}, KindPlan)
	var ue *UnexpectedError
	if !errors.Is(err, ErrUnexpected) || !errors.As(err, &ue) || ue.Got != KindStart || ue.Want != KindPlan {
		t.Fatalf("error %v, want an UnexpectedError of start for plan", err)
	}
	if !strings.Contains(err.Error(), `"start", want "plan"`) {
		t.Errorf("error %q does not name both kinds", err)
	}
}

// Detach hands over the bytes that followed the last line in the same
// read, then the rest of the stream.
func TestDetachKeepsWhatWasBufferedPastTheLastLine(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	go func() {
		a.Write([]byte(`{"type":"started","started":{"pid":1,"machine":{}}}` + "\nraw bytes, "))
		a.Write([]byte("then more"))
		a.Close()
	}()
	c := NewConn(b)
	if m, err := c.Recv(5 * time.Second); err != nil || m.Kind != KindStarted {
		t.Fatalf("read %+v, %v; want started", m, err)
	}
	r, nc := c.Detach()
	defer nc.Close()
	rest, err := io.ReadAll(r)
	if err != nil || string(rest) != "raw bytes, then more" {
		t.Fatalf("the stream past the line is %q, %v", rest, err)
	}
}

func TestPlanValidation(t *testing.T) {
	tests := []struct {
		name    string
		change  func(*Plan)
		wantErr string
	}{
		{"a plan of this version is accepted", func(*Plan) {}, ""},
		{"a plan of another version is refused", func(p *Plan) { p.Version = Version + 1 }, "version"},
		{"a negative message count is refused", func(p *Plan) { p.Messages = -1 }, "messages"},
		{"no heartbeat is refused", func(p *Plan) { p.Heartbeat = 0 }, "heartbeat"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := goodPlan()
			tt.change(&p)
			err := p.Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
}

func TestWorkerPlanValidation(t *testing.T) {
	good := WorkerPlan{Version: Version, Job: "job-1", Node: 3, Listen: "10.0.0.1:0"}
	tests := []struct {
		name    string
		run     bool
		change  func(*WorkerPlan)
		wantErr string
	}{
		{"a plan to run a worker is accepted", true, func(*WorkerPlan) {}, ""},
		{"another version is refused", true, func(p *WorkerPlan) { p.Version = Version - 1 }, "version"},
		{"a job name that is a path is refused", true, func(p *WorkerPlan) { p.Job = "../etc" }, "job name"},
		{"an empty job name is refused", false, func(p *WorkerPlan) { p.Job = "" }, "job name"},
		{"a negative node is refused", false, func(p *WorkerPlan) { p.Node = -1 }, "out of range"},
		{"a node beyond 65536 is refused", false, func(p *WorkerPlan) { p.Node = 1<<16 + 1 }, "out of range"},
		{"a listen address without a port is refused", true, func(p *WorkerPlan) { p.Listen = "10.0.0.1" }, "listen address"},
		{"a kill does not look at the listen address", false, func(p *WorkerPlan) { p.Listen = "10.0.0.1" }, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := good
			tt.change(&p)
			err := p.Validate(tt.run)
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
}

func TestADropNamesOnlyAJobID(t *testing.T) {
	good := WorkerPlan{Version: Version, Job: NewJobID()}
	tests := []struct {
		name    string
		change  func(*WorkerPlan)
		wantErr string
	}{
		{"a new job's id is accepted", func(*WorkerPlan) {}, ""},
		{"another version is refused", func(p *WorkerPlan) { p.Version = Version + 1 }, "version"},
		{"an empty job is refused", func(p *WorkerPlan) { p.Job = "" }, "not a job id"},
		{"the parent directory is refused", func(p *WorkerPlan) { p.Job = ".." }, "not a job id"},
		{"the directory itself is refused", func(p *WorkerPlan) { p.Job = "." }, "not a job id"},
		{"a path up and out is refused", func(p *WorkerPlan) { p.Job = "job-0123456789abcdef/../.." }, "not a job id"},
		{"a path into a job is refused", func(p *WorkerPlan) { p.Job = "job-0123456789abcdef/node0" }, "not a job id"},
		{"an absolute path is refused", func(p *WorkerPlan) { p.Job = "/etc" }, "not a job id"},
		{"a name a worker may have but a new job never has is refused", func(p *WorkerPlan) { p.Job = "Documents" }, "not a job id"},
		{"a job id with upper-case digits is refused", func(p *WorkerPlan) { p.Job = "job-0123456789ABCDEF" }, "not a job id"},
		{"a job id with a newline after it is refused", func(p *WorkerPlan) { p.Job = "job-0123456789abcdef\n" }, "not a job id"},
		{"a job id one digit short is refused", func(p *WorkerPlan) { p.Job = "job-0123456789abcde" }, "not a job id"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := good
			tt.change(&p)
			err := p.ValidateDrop()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one mentioning %q", err, tt.wantErr)
			}
		})
	}
}
