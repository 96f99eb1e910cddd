package control

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"
)

// MaxLine bounds one line, without its newline.
const MaxLine = 64 << 20

// MaxOpeningLine bounds each line of a connection's opening, which an agent
// reads before it knows who is at the other end: the key exchange and the
// first message (a plan, a worker or a kill, each a few hundred bytes). See
// [Conn.SetMaxLine].
const MaxOpeningLine = 64 << 10

// WriteTimeout bounds one Send: a peer that stops reading is as good as
// gone.
const WriteTimeout = 10 * time.Second

// readBuffer is a Conn's read buffer; a longer line is read in pieces.
const readBuffer = 64 << 10

// Conn is one end of a control connection: it writes and reads whole
// messages, each within its deadline.
type Conn struct {
	nc      net.Conn
	br      *bufio.Reader
	maxLine int        // the longest line Recv reads
	mu      sync.Mutex // serialises writes
}

// NewConn wraps nc. The Conn owns nc from then on. Its Recv reads lines of
// up to MaxLine bytes.
func NewConn(nc net.Conn) *Conn {
	return &Conn{nc: nc, br: bufio.NewReaderSize(nc, readBuffer), maxLine: MaxLine}
}

// SetMaxLine makes Recv refuse, with ErrLineTooLong, a line longer than n
// bytes (at most MaxLine). An agent reads a connection's opening with
// MaxOpeningLine, so that a stranger cannot make it hold MaxLine bytes, and
// raises it to MaxLine once the first message is in. Like Recv, it is for
// the connection's one reader.
func (c *Conn) SetMaxLine(n int) { c.maxLine = min(n, MaxLine) }

// Send writes m as one line, waiting at most WriteTimeout. It is safe for
// concurrent use: lines never interleave.
func (c *Conn) Send(m Msg) error {
	b, err := Append(nil, m)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.nc.SetWriteDeadline(time.Now().Add(WriteTimeout))
	_, err = c.nc.Write(b)
	return timedOut(err)
}

// Recv reads the next message, waiting at most timeout (0: no limit). It
// is not safe for concurrent use: a connection has one reader.
func (c *Conn) Recv(timeout time.Duration) (Msg, error) {
	var dl time.Time
	if timeout > 0 {
		dl = time.Now().Add(timeout)
	}
	_ = c.nc.SetReadDeadline(dl)
	line, err := ReadLine(c.br, c.maxLine)
	if err != nil {
		return Msg{}, timedOut(err)
	}
	return Decode(line)
}

// Close closes the connection, which ends a Recv blocked on it. It is safe
// for concurrent use.
func (c *Conn) Close() error { return c.nc.Close() }

// CloseWrite ends what c sends, which the peer reads as the connection's
// end, and leaves c open for reading what the peer still sends; on a
// connection that cannot half-close, it closes c.
func (c *Conn) CloseWrite() error {
	if hc, ok := c.nc.(interface{ CloseWrite() error }); ok {
		return hc.CloseWrite()
	}
	return c.nc.Close()
}

// Detach ends the line protocol on c: it clears the deadlines and returns
// the connection's byte stream, a reader that yields what was buffered past
// the last line before what arrives next, and the connection itself, for
// writing and closing. c must not be used after.
func (c *Conn) Detach() (io.Reader, net.Conn) {
	_ = c.nc.SetDeadline(time.Time{})
	return c.br, c.nc
}

// timedOut wraps a net timeout in ErrTimeout.
func timedOut(err error) error {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("%w: %w", ErrTimeout, err)
	}
	return err
}

// ReadLine reads one line of at most limit bytes and returns it without its
// newline; the slice is the caller's. At the end of the stream it returns
// io.EOF, or ErrTruncated when the stream ended inside a line; a line over
// limit fails with ErrLineTooLong as soon as a piece of it that r returns
// (up to a newline or r's buffer size) takes it past limit, so it never
// holds more than limit bytes and one buffer. A line that stops coming
// before that is the caller's deadline to end.
func ReadLine(r *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := r.ReadSlice('\n')
		if len(line)+len(chunk) > limit+1 || len(line)+len(chunk) == limit+1 && err != nil {
			return nil, fmt.Errorf("%w: over %d bytes", ErrLineTooLong, limit)
		}
		line = append(line, chunk...)
		switch {
		case err == nil:
			return bytes.TrimSuffix(line, []byte{'\n'}), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return nil, fmt.Errorf("%w after %d bytes: %w", ErrTruncated, len(line), io.ErrUnexpectedEOF)
		default:
			return nil, err
		}
	}
}
