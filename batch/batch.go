// Package batch decides when a connection cuts its outgoing batch and
// compresses batches that are worth compressing.
//
// It is a state machine with no I/O and no goroutines: time comes in as a
// monotonic clock reading in nanoseconds, decisions go out as return values.
// The transport drives it from the connection's event loop (a pull model):
//
//  1. Senders append messages to per-channel buffers and wake the loop.
//  2. On the loop, the connection calls [Policy.Decide] with the number of
//     bytes waiting to be batched ("ready bytes").
//  3. If the [Decision] says Flush, the connection cuts a batch of at most
//     [Config.MaxBatchBytes], optionally compresses it with a [Compressor],
//     hands it to the socket and reports it with [Policy.Flushed]. If bytes
//     are still waiting it calls Decide again.
//  4. If the Decision has a WakeAt, the connection arms a timer and calls
//     Decide again at that time (or earlier, when more data arrives).
//  5. When the socket completes a write, the connection calls
//     [Policy.WriteDone] and then Decide.
//
// The policy flushes at once when nothing is in flight, so a lone message is
// never delayed by a timer. While writes are in flight it accumulates until
// the batch is full, a write completes, or the linger time since the first
// waiting byte ends, and it never lets more than [Config.MaxInflight] batches
// be in flight. The linger adapts to what the connection observes; see
// [Policy.Linger] for the rule.
//
// On the receiving side, [Decompress] expands a compressed batch with a hard
// limit on its decoded size.
package batch

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

// Config tunes a [Policy] and the [Compressor] of one connection. The zero
// Config is not valid; start from [DefaultConfig].
type Config struct {
	// MaxBatchBytes is the size at which a batch is cut without waiting
	// further, and the largest batch the transport should cut. Default 64 KiB.
	MaxBatchBytes int
	// Linger is the initial time data may wait for more data while writes
	// are in flight, before any write time or rate has been observed.
	// Default 50 µs. It must lie within [MinLinger, MaxLinger].
	Linger time.Duration
	// MinLinger and MaxLinger bound the adapted linger. Defaults 5 µs and
	// 1 ms. Setting both to Linger disables adaptation.
	MinLinger, MaxLinger time.Duration
	// MaxInflight is the most batches handed to the socket whose writes have
	// not completed. It bounds the memory frozen in pending writes.
	// Default 4.
	MaxInflight int
	// CompressThreshold is the smallest batch, in bytes, that is worth
	// trying to compress; 0 means never compress. Default 0.
	CompressThreshold int
}

// Defaults used by [DefaultConfig].
const (
	DefaultMaxBatchBytes = 64 << 10
	DefaultLinger        = 50 * time.Microsecond
	DefaultMinLinger     = 5 * time.Microsecond
	DefaultMaxLinger     = time.Millisecond
	DefaultMaxInflight   = 4
)

// DefaultConfig returns the defaults documented on [Config]'s fields.
func DefaultConfig() Config {
	return Config{
		MaxBatchBytes: DefaultMaxBatchBytes,
		Linger:        DefaultLinger,
		MinLinger:     DefaultMinLinger,
		MaxLinger:     DefaultMaxLinger,
		MaxInflight:   DefaultMaxInflight,
	}
}

// ErrConfig is wrapped by every error [Config.Validate] returns.
var ErrConfig = errors.New("batch: invalid config")

// Validate reports the first field of c that is out of range, as an error
// wrapping [ErrConfig].
func (c Config) Validate() error {
	switch {
	case c.MaxBatchBytes <= 0:
		return fmt.Errorf("%w: MaxBatchBytes is %d, must be positive", ErrConfig, c.MaxBatchBytes)
	case c.MaxInflight < 1:
		return fmt.Errorf("%w: MaxInflight is %d, must be at least 1", ErrConfig, c.MaxInflight)
	case c.MinLinger < 0:
		return fmt.Errorf("%w: MinLinger is %v, must not be negative", ErrConfig, c.MinLinger)
	case c.MaxLinger < c.MinLinger:
		return fmt.Errorf("%w: MaxLinger %v is below MinLinger %v", ErrConfig, c.MaxLinger, c.MinLinger)
	case c.Linger < c.MinLinger || c.Linger > c.MaxLinger:
		return fmt.Errorf("%w: Linger %v is outside [MinLinger %v, MaxLinger %v]", ErrConfig, c.Linger, c.MinLinger, c.MaxLinger)
	case c.CompressThreshold < 0:
		return fmt.Errorf("%w: CompressThreshold is %d, must not be negative (0 means never)", ErrConfig, c.CompressThreshold)
	}
	return nil
}

// Cause says why a batch was flushed. Causes index [Stats.Flushes].
type Cause uint8

// The causes of a flush. When several apply, [Policy.Decide] reports them in
// this order of precedence: CauseFull, CauseExplicit, CauseWriteDone,
// CauseIdle, CauseLinger.
const (
	// CauseIdle: nothing was in flight, so the data went out at once.
	CauseIdle Cause = iota
	// CauseFull: the waiting data reached MaxBatchBytes.
	CauseFull
	// CauseLinger: the linger time since the first waiting byte ended.
	CauseLinger
	// CauseWriteDone: a write completed while data was waiting.
	CauseWriteDone
	// CauseExplicit: the application asked for a flush (Flush or Close).
	CauseExplicit

	// NumCauses is the number of causes, for arrays indexed by Cause.
	NumCauses = iota
)

var causeNames = [NumCauses]string{"idle", "full", "linger", "write-done", "explicit"}

// String returns the cause's lower-case name, such as "linger", or
// "Cause(N)" for a value out of range.
func (c Cause) String() string {
	if int(c) < len(causeNames) {
		return causeNames[c]
	}
	return "Cause(" + strconv.Itoa(int(c)) + ")"
}
