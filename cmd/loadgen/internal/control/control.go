// Package control is the protocol between `loadgen coordinate` and the
// `loadgen agent`s it drives: the messages, their framing on a TCP
// connection, and the connection's authentication.
//
// # Framing
//
// A message is one JSON object on one line: the object, then '\n'. A line
// holds at most [MaxLine] bytes without its newline; a longer one is refused
// with [ErrLineTooLong] on both sides (the sender refuses to write it, the
// receiver to read past it). The largest lines are findings, which carry
// one exported latency histogram per sender, a few hundred KiB each. An
// agent reads the lines of a connection's opening (the key exchange and the
// first message) with the lower bound [MaxOpeningLine]. A
// connection that ends inside a line fails with [ErrTruncated]; a line
// that is not a JSON object, names no kind or a kind this package does not
// know, or lacks the body its kind requires fails with [ErrMalformed] or
// [ErrUnknownKind]. After ErrLineTooLong, ErrTruncated or a timeout
// ([ErrTimeout]) the stream's position is lost and the connection is good
// only for closing; after ErrMalformed or ErrUnknownKind the next line can
// be read, but loadgen ends the run either way.
//
// # Messages
//
// Every message has a kind (the "type" field) and the body its kind
// requires (see the Kind constants); a receiver ignores the other fields.
// A run goes through these steps. An agent answers a message out of order
// ([UnexpectedError]) or a line that breaks the framing or the schema
// ([IsBadInput]) with an "error" message and ends the run; a coordinator
// that meets either ends the run and closes its connections:
//
//	coordinator -> agent            agent -> coordinator
//	plan {Plan}                     ready {Ready}
//	connect {to, index}             connected
//	start {start time}              done {Done}          (senders only)
//	collect {epochs}                findings {Findings}
//	bye                             bye
//
// From the plan on, the agent sends "progress" {Progress} every
// Plan.Heartbeat. A connection whose first message is "worker" {WorkerPlan}
// runs one engine worker and, after the agent's "started" {Started}, carries
// the worker's stdin and stdout as raw bytes ([Conn.Detach]); "kill"
// {WorkerPlan} is answered by "killed" {Started}; "drop" {WorkerPlan: its
// job} by "dropped", once the agent has removed the job's directory, which
// it refuses while a worker of the job runs ([WorkerPlan.ValidateDrop]).
// With a key, both sides first prove they hold it ([Authenticate]: "auth"
// then "proof").
//
// # Versions
//
// Plans carry [Version], and an agent refuses a plan or worker plan of
// another version: a coordinator and agents built from different commits
// fail at the first message instead of half-working. There is no
// negotiation and no compatibility between versions; a change that an
// older peer would misread bumps Version. Unknown fields in an object are
// ignored (encoding/json's rule), so a field whose absence means what it
// meant before may be added within a version. Version 2 added the plan's
// ClockCorrection and done's Clock; received's Malformed came within it, and
// so did drop and dropped (an agent older than them answers a drop with an
// "error": unknown kind).
package control

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"regexp"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/sluicehq/sluice/bench"
)

// Version is the protocol's version; see the package doc.
const Version = 2

// Kind says what a message is and which body it carries.
type Kind string

// The kinds of message, and the body each one requires.
const (
	KindPlan      Kind = "plan"      // Plan
	KindReady     Kind = "ready"     // Ready
	KindConnect   Kind = "connect"   // To (empty: only receive), Index
	KindConnected Kind = "connected" // -
	KindStart     Kind = "start"     // StartAt, positive
	KindProgress  Kind = "progress"  // Progress
	KindDone      Kind = "done"      // Done
	KindCollect   Kind = "collect"   // Epochs (empty: none)
	KindFindings  Kind = "findings"  // Findings
	KindBye       Kind = "bye"       // -
	KindError     Kind = "error"     // Error, not empty
	KindWorker    Kind = "worker"    // Worker
	KindStarted   Kind = "started"   // Started
	KindKill      Kind = "kill"      // Worker
	KindKilled    Kind = "killed"    // Started
	KindDrop      Kind = "drop"      // Worker: Job
	KindDropped   Kind = "dropped"   // -
	KindAuth      Kind = "auth"      // Nonce
	KindProof     Kind = "proof"     // MAC
)

var (
	// ErrLineTooLong means a line exceeded MaxLine.
	ErrLineTooLong = errors.New("control: line too long")
	// ErrTruncated means the connection ended inside a line. It wraps
	// io.ErrUnexpectedEOF.
	ErrTruncated = errors.New("control: connection closed in the middle of a line")
	// ErrMalformed means a line is not a message: not a JSON object, no
	// kind, or without the body its kind requires.
	ErrMalformed = errors.New("control: malformed message")
	// ErrUnknownKind means a message of a kind this package does not know.
	ErrUnknownKind = errors.New("control: unknown message kind")
	// ErrUnexpected means a message came out of order; see UnexpectedError.
	ErrUnexpected = errors.New("control: unexpected message")
	// ErrTimeout means a read or a write did not finish in time. It wraps
	// the net.Error that said so.
	ErrTimeout = errors.New("control: timed out")
)

// IsBadInput reports whether err says the peer broke the framing or the
// schema (ErrLineTooLong, ErrMalformed, ErrUnknownKind): a peer that is
// still there, and may be told why in an "error" message before the
// connection closes.
func IsBadInput(err error) bool {
	return errors.Is(err, ErrLineTooLong) || errors.Is(err, ErrMalformed) || errors.Is(err, ErrUnknownKind)
}

// UnexpectedError is a message of kind Got where the protocol wants Want.
// It matches ErrUnexpected under errors.Is.
type UnexpectedError struct {
	Got, Want Kind
}

func (e *UnexpectedError) Error() string {
	return fmt.Sprintf("control: unexpected message %q, want %q", e.Got, e.Want)
}

// Is makes errors.Is(err, ErrUnexpected) true.
func (e *UnexpectedError) Is(target error) bool { return target == ErrUnexpected }

// Expect returns nil when m is of kind want, else an *UnexpectedError.
func Expect(m Msg, want Kind) error {
	if m.Kind != want {
		return &UnexpectedError{Got: m.Kind, Want: want}
	}
	return nil
}

// Msg is one message. Kind says which of the other fields are set.
type Msg struct {
	Kind Kind `json:"type"`

	Plan *Plan `json:"plan,omitempty"`
	// To is the data address the agent sends to; empty: it only receives.
	To string `json:"to,omitempty"`
	// Index numbers the senders of a run, so that each uses its own source
	// tasks and no two senders' channels fence each other at a receiver.
	Index int `json:"index,omitempty"`
	// StartAt is the wall-clock time to start sending, in nanoseconds since
	// 1970.
	StartAt int64 `json:"start_at_unix_ns,omitempty"`
	// Epochs are the epochs of the senders whose findings are wanted.
	Epochs []uint64 `json:"epochs,omitempty"`

	Ready    *Ready    `json:"ready,omitempty"`
	Progress *Progress `json:"progress,omitempty"`
	Done     *Done     `json:"done,omitempty"`
	Findings *Findings `json:"findings,omitempty"`
	Error    string    `json:"error,omitempty"`

	Worker  *WorkerPlan `json:"worker,omitempty"`  // worker, kill, drop
	Started *Started    `json:"started,omitempty"` // started, killed

	Nonce []byte `json:"nonce,omitempty"` // auth: a fresh challenge
	MAC   []byte `json:"mac,omitempty"`   // proof: HMAC over the role and both challenges
}

// check refuses a message whose kind is unknown or whose body is missing.
func (m *Msg) check() error {
	var has bool
	switch m.Kind {
	case "":
		return fmt.Errorf("%w: no type", ErrMalformed)
	case KindConnect, KindConnected, KindCollect, KindBye, KindDropped:
		has = true
	case KindPlan:
		has = m.Plan != nil
	case KindReady:
		has = m.Ready != nil
	case KindStart:
		has = m.StartAt > 0
	case KindProgress:
		has = m.Progress != nil
	case KindDone:
		has = m.Done != nil
	case KindFindings:
		has = m.Findings != nil
	case KindError:
		has = m.Error != ""
	case KindWorker, KindKill, KindDrop:
		has = m.Worker != nil
	case KindStarted, KindKilled:
		has = m.Started != nil
	case KindAuth:
		has = len(m.Nonce) > 0
	case KindProof:
		has = len(m.MAC) > 0
	default:
		return fmt.Errorf("%w %q", ErrUnknownKind, m.Kind)
	}
	if !has {
		return fmt.Errorf("%w: %q without its body", ErrMalformed, m.Kind)
	}
	return nil
}

// Append appends m's line, newline included, to dst. It fails with
// ErrLineTooLong when the line would exceed MaxLine and with ErrMalformed
// when m is not a message Decode would accept.
func Append(dst []byte, m Msg) ([]byte, error) {
	if err := m.check(); err != nil {
		return dst, err
	}
	b, err := json.Marshal(m)
	if err != nil {
		return dst, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if len(b) > MaxLine {
		return dst, fmt.Errorf("%w: a %q message of %d bytes (the limit is %d)", ErrLineTooLong, m.Kind, len(b), MaxLine)
	}
	return append(append(dst, b...), '\n'), nil
}

// Decode decodes one line, without its newline. The message does not keep
// line.
func Decode(line []byte) (Msg, error) {
	var m Msg
	if err := json.Unmarshal(line, &m); err != nil {
		return Msg{}, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if err := m.check(); err != nil {
		return Msg{}, err
	}
	return m, nil
}

// Plan is an agent's part in a run.
type Plan struct {
	Version     int     `json:"version"`
	Size        int     `json:"size"`
	Channels    int     `json:"channels"`
	Connections int     `json:"connections"`
	Rate        float64 `json:"rate"` // this agent's sending rate; 0: as fast as possible
	// Messages is how many messages this agent sends; 0: Duration decides.
	Messages    int64         `json:"messages"`
	Duration    time.Duration `json:"duration_ns"`
	ConsumeRate float64       `json:"consume_rate"`
	Heartbeat   time.Duration `json:"heartbeat_ns"`
	// ClockCorrection makes a sender stamp its send times in its
	// receiver's clock.
	ClockCorrection bool `json:"clock_correction"`
	// Producers is how many goroutines of a sending agent send at full
	// speed; 0: half its cores (at least one).
	Producers int `json:"producers,omitempty"`
	// Delivery is how a receiving agent hands runs to its tasks: "inline",
	// "goroutine", or "" / "auto" (inline unless ConsumeRate is set).
	Delivery string `json:"delivery,omitempty"`
}

// Validate checks what the protocol itself defines: the version, the
// heartbeat and the message count. The load the plan describes (size,
// channels, rates, duration) is the agent's to check against its own
// limits.
func (p *Plan) Validate() error {
	if p.Version != Version {
		return fmt.Errorf("plan: control protocol version %d, this agent speaks %d", p.Version, Version)
	}
	if p.Messages < 0 {
		return fmt.Errorf("plan: messages must not be negative, got %d", p.Messages)
	}
	if p.Heartbeat <= 0 {
		return fmt.Errorf("plan: heartbeat must be positive, got %v", p.Heartbeat)
	}
	return nil
}

// Ready answers a plan.
type Ready struct {
	// DataAddr is where the agent's node accepts senders.
	DataAddr string `json:"data_addr"`
	// Epoch is the epoch of the channels the agent will send on; receivers
	// keep their findings by it.
	Epoch   uint64        `json:"epoch"`
	Machine bench.Machine `json:"machine"`
}

// Progress is a heartbeat with the agent's counters so far.
type Progress struct {
	Sent      int64 `json:"sent"`      // messages written by this agent's node
	Delivered int64 `json:"delivered"` // messages this agent received exactly once and in order
}

// Done reports a sender's end: every message sent was acknowledged, or Err
// says why not.
type Done struct {
	Sent    int64         `json:"sent"`
	Elapsed time.Duration `json:"elapsed_ns"` // from the start time to the last acknowledgement
	Late    time.Duration `json:"late_ns"`    // how long after the start time sending began
	Resent  int64         `json:"resent"`
	Err     string        `json:"error,omitempty"`
	// Clock is how the sender corrected its send times for the receiver's
	// clock.
	Clock *bench.ClockCorrection `json:"clock,omitempty"`
}

// Findings answers a collect: what the agent received from each sender
// epoch asked for, and what its node wrote.
type Findings struct {
	BySender map[uint64]Received `json:"by_sender"`
	WireOut  int64               `json:"wire_bytes_out"`
	Clamped  int64               `json:"clamped"`
}

// Received is what a receiver got from one sender, with its latency
// histogram exported for another process to merge. `loadgen serve` answers
// `loadgen send` with it too.
type Received struct {
	Delivered  int64 `json:"delivered"`
	Duplicates int64 `json:"duplicates"`
	Gaps       int64 `json:"gaps"`
	// Malformed counts payloads too short for the send time and sequence
	// number, counted neither as delivered nor as gaps.
	Malformed int64                  `json:"malformed,omitempty"`
	Bytes     int64                  `json:"bytes"`
	Latency   *hdrhistogram.Snapshot `json:"latency"`
}

// WorkerPlan asks an agent to run, or to kill, one engine worker, or to
// drop a job's directory.
type WorkerPlan struct {
	Version int `json:"version"`
	// Job names the job's directory on the agent; Node the worker.
	Job  string `json:"job"`
	Node int    `json:"node"`
	// Spec is the job (jobs.Spec as JSON).
	Spec json.RawMessage `json:"spec,omitempty"`
	// Listen is the worker's transport address; empty: the address the
	// coordinator reached the agent at, any port.
	Listen string `json:"listen,omitempty"`
	Faults string `json:"faults,omitempty"`
	Seed   uint64 `json:"seed,omitempty"`
	Fsync  bool   `json:"fsync,omitempty"`
}

var (
	jobName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	jobID   = regexp.MustCompile(`^job-[0-9a-f]{16}$`)
)

// NewJobID returns a new job's name on the agents: "job-" and 16 random
// hex digits, the only form a drop accepts.
func NewJobID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return "job-" + hex.EncodeToString(b[:])
}

// Validate checks the version, the job name (it names a directory) and the
// node; for a plan that runs a worker (run), also the listen address. The
// job's spec is the agent's to check.
func (p *WorkerPlan) Validate(run bool) error {
	if p.Version != Version {
		return fmt.Errorf("worker: control protocol version %d, this agent speaks %d", p.Version, Version)
	}
	if !jobName.MatchString(p.Job) {
		return fmt.Errorf("worker: job name %q is not 1-64 of [A-Za-z0-9_-]", p.Job)
	}
	if p.Node < 0 || p.Node > 1<<16 {
		return fmt.Errorf("worker: node %d out of range", p.Node)
	}
	if run && p.Listen != "" {
		if _, _, err := net.SplitHostPort(p.Listen); err != nil {
			return fmt.Errorf("worker: listen address %q: %w", p.Listen, err)
		}
	}
	return nil
}

// ValidateDrop checks a drop: the version, and the job, which must be of
// the form NewJobID makes. The agent removes the job's directory, in a
// --data-dir that may hold other things than jobs: a name of that one form
// is never "", "." or "..", never holds a separator, and is never a
// directory the user keeps there for something else.
func (p *WorkerPlan) ValidateDrop() error {
	if p.Version != Version {
		return fmt.Errorf("drop: control protocol version %d, this agent speaks %d", p.Version, Version)
	}
	if !jobID.MatchString(p.Job) {
		return fmt.Errorf("drop: job %q is not a job id (job- and 16 hex digits)", p.Job)
	}
	return nil
}

// Started answers a worker plan.
type Started struct {
	Pid     int           `json:"pid"`
	Machine bench.Machine `json:"machine"`
}
