package taskid

import (
	"errors"
	"fmt"
)

// Channel is one logical stream of messages from a source task to a target
// task. Epoch is the source task's incarnation: a restarted task opens its
// channels with a higher epoch, and the receiver fences off older ones.
type Channel struct {
	Source ID
	Target ID
	Epoch  uint64
}

// String formats the channel as "source->target@epoch", for example
// "1.0->2.3@4", for logs.
func (c Channel) String() string {
	return fmt.Sprintf("%v->%v@%d", c.Source, c.Target, c.Epoch)
}

// Errors returned by [Table].
var (
	// ErrUnknownChannel means a frame named a channel number that was never
	// opened on this connection, or was closed.
	ErrUnknownChannel = errors.New("taskid: channel number was never opened on this connection")
	// ErrChannelInUse means an OPEN named a channel number that is already open.
	ErrChannelInUse = errors.New("taskid: channel number is already open")
	// ErrTooManyChannels means the table is at its configured limit.
	ErrTooManyChannels = errors.New("taskid: too many channels open on this connection")
	// ErrChannelNumber means an OPEN named a channel number so far beyond
	// the open count that binding it would take unreasonable memory; a
	// well-behaved peer reuses small numbers.
	ErrChannelNumber = errors.New("taskid: channel number is far beyond the open channels")
)

// Table maps the channel numbers of one connection to channels, in one
// direction. The sending side assigns numbers with [Table.Assign]; the
// receiving side records them with [Table.Bind] when it reads an OPEN frame.
// Numbers are small and reused after [Table.Remove], so their varints stay
// short.
//
// A Table is not safe for concurrent use; it belongs to one connection.
type Table struct {
	max     int
	entries []entry // indexed by channel number
	free    []uint32
	open    int
	byChan  map[Channel]uint32
}

type entry struct {
	ch      Channel
	used    bool
	retired bool // closed, its number held back from reuse until Remove
}

// NewTable returns an empty table that holds at most max open channels.
// max <= 0 means no limit.
func NewTable(max int) *Table {
	return &Table{max: max, byChan: make(map[Channel]uint32)}
}

// Len is the number of open channels.
func (t *Table) Len() int { return t.open }

// Assign returns the number of ch, giving it a free number (the one freed
// last, or the next unused one) if it has none yet. isNew reports whether
// the number was just assigned, that is whether the caller must send an
// OPEN frame.
func (t *Table) Assign(ch Channel) (num uint32, isNew bool, err error) {
	if n, ok := t.byChan[ch]; ok {
		return n, false, nil
	}
	if t.max > 0 && t.open >= t.max {
		return 0, false, fmt.Errorf("%w (limit %d)", ErrTooManyChannels, t.max)
	}
	// Reuse freed numbers LIFO, which keeps them small without a heap.
	// A freed number may have been taken by Bind since (if a table is used
	// in both directions), so skip numbers that are in use again.
	found := false
	for k := len(t.free); k > 0 && !found; k = len(t.free) {
		num = t.free[k-1]
		t.free = t.free[:k-1]
		found = !t.entries[num].used
	}
	if !found {
		num = uint32(len(t.entries))
		t.entries = append(t.entries, entry{})
	}
	t.entries[num] = entry{ch: ch, used: true}
	t.byChan[ch] = num
	t.open++
	return num, true, nil
}

// Bind records that the peer opened ch under num.
func (t *Table) Bind(num uint32, ch Channel) error {
	if t.max > 0 && t.open >= t.max {
		return fmt.Errorf("%w (limit %d)", ErrTooManyChannels, t.max)
	}
	// A peer may claim any 32-bit number; grow the slice only for numbers
	// that stay close to the open count, so a hostile OPEN cannot make us
	// allocate 4 billion entries. (In int64: on a 32-bit platform int(num)
	// of 2^31 or more is negative and would pass both tests.)
	if int64(num) >= int64(len(t.entries)) {
		if int64(num) > 2*int64(t.open)+1024 {
			return fmt.Errorf("%w: %d with %d open", ErrChannelNumber, num, t.open)
		}
		t.entries = append(t.entries, make([]entry, int(num)+1-len(t.entries))...)
	}
	if t.entries[num].used {
		return fmt.Errorf("%w: %d is %v", ErrChannelInUse, num, t.entries[num].ch)
	}
	// The same channel under two numbers would leave byChan pointing at only
	// one of them, and removing either would orphan the other.
	if other, ok := t.byChan[ch]; ok {
		return fmt.Errorf("%w: %v is already open under %d", ErrChannelInUse, ch, other)
	}
	t.entries[num] = entry{ch: ch, used: true}
	t.byChan[ch] = num
	t.open++
	return nil
}

// Lookup returns the channel open under num.
func (t *Table) Lookup(num uint32) (Channel, error) {
	if int64(num) >= int64(len(t.entries)) || !t.entries[num].used || t.entries[num].retired {
		return Channel{}, fmt.Errorf("%w: %d", ErrUnknownChannel, num)
	}
	return t.entries[num].ch, nil
}

// Number returns the number of ch, if it is open.
func (t *Table) Number(ch Channel) (uint32, bool) {
	n, ok := t.byChan[ch]
	return n, ok
}

// Retire closes the channel under num but holds the number back from reuse
// until Remove: frames about the old channel may still be on their way, and
// must not be taken for a new channel's. Lookup fails for a retired number;
// Assign of the same channel gets a new number.
func (t *Table) Retire(num uint32) error {
	if int64(num) >= int64(len(t.entries)) || !t.entries[num].used || t.entries[num].retired {
		return fmt.Errorf("%w: %d", ErrUnknownChannel, num)
	}
	delete(t.byChan, t.entries[num].ch)
	t.entries[num].retired = true
	return nil
}

// Retired reports whether num is held back by Retire.
func (t *Table) Retired(num uint32) bool {
	return int64(num) < int64(len(t.entries)) && t.entries[num].retired
}

// Remove closes the channel under num (or ends a Retire) and frees the
// number for reuse.
func (t *Table) Remove(num uint32) error {
	if int64(num) >= int64(len(t.entries)) || !t.entries[num].used {
		return fmt.Errorf("%w: %d", ErrUnknownChannel, num)
	}
	if !t.entries[num].retired {
		delete(t.byChan, t.entries[num].ch)
	}
	t.entries[num] = entry{}
	// A receiving table (Bind only) never pops free, so bound it: a peer
	// that opens and closes forever must not grow it. Each number is in
	// free at most once when only Assign is used, so the bound never drops
	// a number there.
	if len(t.free) < len(t.entries) {
		t.free = append(t.free, num)
	}
	t.open--
	return nil
}
