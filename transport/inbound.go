// The inbound demux of an accepting connection: the channel numbers the
// dialer opened, and the receiving state (recvState, receive.go) each
// number's frames go to. Loop only: its fields are under conn.in.

package transport

import (
	"fmt"
	"io"

	"github.com/sluicehq/sluice/batch"
	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/wire"
)

// inChan is an inbound channel open on an accepted connection.
type inChan struct {
	key   taskid.Channel
	rs    *recvState
	stale bool // opened with an epoch older than the receiver's: all its frames are dropped
}

// demux hands a frame of the accepting side to its channel.
func (c *conn) demux(f wire.Frame) error {
	switch f.Type {
	case wire.FrameData:
		return c.onData(f)
	case wire.FrameOpen:
		o, err := wire.ParseOpen(f.Body)
		if err != nil {
			return err
		}
		return c.onOpen(o)
	case wire.FrameClose:
		cl, err := wire.ParseClose(f.Body)
		if err != nil {
			return err
		}
		if err := c.in.table.Remove(cl.Channel); err != nil {
			return err
		}
		if ic := c.in.byNum[cl.Channel]; ic != nil && !ic.stale {
			ic.rs.detach(c, cl.Channel)
		}
		c.in.byNum[cl.Channel] = nil
		return nil
	default: // wire.FrameAckRequest
		r, err := wire.ParseAckRequest(f.Body)
		if err != nil {
			return err
		}
		ic, err := c.inChan(r.Channel)
		if err != nil {
			return err
		}
		if ic.stale {
			c.in.counts.stale++
			return nil
		}
		ic.rs.onAckRequest(c, r)
		return nil
	}
}

func (c *conn) inChan(num uint32) (*inChan, error) {
	if ic := c.openIn(num); ic != nil {
		return ic, nil
	}
	return nil, fmt.Errorf("%w: %d", wire.ErrUnknownChannel, num)
}

// openIn returns the inbound channel open under num, or nil.
func (c *conn) openIn(num uint32) *inChan {
	if int(num) < len(c.in.byNum) {
		return c.in.byNum[num]
	}
	return nil
}

func (c *conn) onOpen(o wire.Open) error {
	key := taskid.Channel{Source: o.Source, Target: o.Target, Epoch: o.Epoch}
	if ic := c.openIn(o.Channel); ic != nil && ic.key == key {
		// A duplicated OPEN: the channel is open already; answer again.
		ic.rs.onOpen(c, o, ic)
		return nil
	}
	if err := c.in.table.Bind(o.Channel, key); err != nil {
		return err
	}
	rs, err := c.node.recvState(o.Source, o.Target)
	if err != nil {
		return err
	}
	for int(o.Channel) >= len(c.in.byNum) {
		c.in.byNum = append(c.in.byNum, nil)
	}
	ic := &inChan{key: key, rs: rs}
	c.in.byNum[o.Channel] = ic
	ic.rs.onOpen(c, o, ic)
	return nil
}

func (c *conn) onData(f wire.Frame) error {
	body := f.Body
	if f.Flags&wire.DataCompressed != 0 {
		var err error
		c.in.dbuf, err = batch.Decompress(c.in.dbuf[:0], body, c.node.o.maxFrame)
		if err != nil {
			return &wire.FrameError{Type: wire.FrameData, Err: err}
		}
		body = c.in.dbuf
	}
	err := c.readRuns(body)
	if cap(c.in.msgs) > maxScratchMsgs {
		c.in.msgs = nil // grown for a run far larger than honest ones
	}
	return err
}

// maxScratchMsgs is the most messages the scratch slice of a connection
// (conn.in.msgs) keeps room for between DATA frames. A body of empty
// messages holds one in every two bytes, and each takes a 32-byte Message:
// kept, the room one frame made would be 16 times the frame, for as long
// as the connection lives. 16384 is 512 KiB, and more than a 64 KiB batch
// of messages of two bytes or more holds.
const maxScratchMsgs = 1 << 14

// readRuns hands the runs of a DATA body to their channels, for onData.
func (c *conn) readRuns(body []byte) error {
	rd := &c.in.rd
	rd.Reset(body)
	for {
		msgs, h, err := rd.ReadRun(c.in.msgs)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		c.in.msgs = msgs[:0]
		ic, err := c.inChan(h.Channel)
		if err != nil {
			return err
		}
		c.in.counts.msgs += uint64(len(msgs))
		if ic.stale {
			c.in.counts.stale += uint64(len(msgs))
			continue
		}
		if err := ic.rs.onRun(c, ic, h.FirstSeq, msgs); err != nil {
			return err
		}
	}
}
