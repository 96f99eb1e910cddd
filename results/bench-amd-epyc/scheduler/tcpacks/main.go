// Command tcpacks is the scratch measurement of results/bench-amd-epyc/scheduler:
// plain TCP on loopback with 64 KiB writes of 100-byte messages (no framing,
// nothing checked: loadgen bench's "plain TCP with flow control" is the
// checked version), with or without the flow control of a window and its
// acks, and with the acks read either on a goroutine of their own or by the
// writing goroutine itself.
//
//	go run ./results/bench-amd-epyc/scheduler/tcpacks -role r &   # the reader
//	go run ./results/bench-amd-epyc/scheduler/tcpacks -role w [-ack 1024 -window 4096 [-self]]
//
// The writer prints M msgs/s. Run the two roles in two processes, and the
// writer under GOMAXPROCS=1 or 2.
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"sync"
	"syscall"
	"time"
)

const msgSize = 100

func main() {
	role := flag.String("role", "w", "r (reader, listens) or w (writer, dials)")
	addr := flag.String("addr", "127.0.0.1:7481", "the reader's address")
	ack := flag.Int("ack", 0, "messages the reader acknowledges at a time; 0: no acks, no flow control")
	window := flag.Int("window", 4096, "messages the writer may have unacknowledged")
	self := flag.Bool("self", false, "the writing goroutine reads the acks itself")
	dur := flag.Duration("duration", 4*time.Second, "how long the writer writes")
	flag.Parse()
	if *role == "r" {
		if err := read(*addr, *ack); err != nil {
			log.Fatal(err)
		}
		return
	}
	rate, err := write(*addr, *ack, *window, *self, *dur)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%.1f\n", rate/1e6)
}

// read accepts one connection and reads it to the end, writing the count of
// messages received (8 bytes) each time another ack of them arrived.
func read(addr string, ack int) error {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	c, err := l.Accept()
	if err != nil {
		return err
	}
	buf := make([]byte, 64<<10)
	var n, next int64 = 0, int64(ack) * msgSize
	var a [8]byte
	for {
		k, err := c.Read(buf)
		n += int64(k)
		if ack > 0 && n >= next {
			binary.BigEndian.PutUint64(a[:], uint64(n/msgSize))
			if _, err := c.Write(a[:]); err != nil {
				return err
			}
			next = (n/msgSize/int64(ack) + 1) * int64(ack) * msgSize
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// write writes 64 KiB buffers for dur and returns the messages a second.
func write(addr string, ack, window int, self bool, dur time.Duration) (float64, error) {
	nc, err := net.Dial("tcp", addr)
	if err != nil {
		return 0, err
	}
	c := nc.(*net.TCPConn)
	defer c.Close()
	var mu sync.Mutex
	cond := sync.NewCond(&mu)
	var acked int64 // messages acknowledged, under mu
	take := func(b []byte) {
		for ; len(b) >= 8; b = b[8:] {
			acked = max(acked, int64(binary.BigEndian.Uint64(b)))
		}
	}
	if ack > 0 && !self {
		go func() {
			var a [8]byte
			for {
				if _, err := io.ReadFull(c, a[:]); err != nil {
					return
				}
				mu.Lock()
				take(a[:])
				cond.Broadcast()
				mu.Unlock()
			}
		}()
	}
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	acks := make([]byte, 8<<10)
	buf := make([]byte, 64<<10/msgSize*msgSize)
	per := int64(len(buf) / msgSize)
	start := time.Now()
	var sent int64
	for time.Since(start) < dur {
		for i := 0; i+2*msgSize <= len(buf); i += msgSize { // touch the buffer as a packer would
			copy(buf[i:i+msgSize], buf[i+msgSize:i+2*msgSize])
		}
		switch {
		case ack > 0 && self:
			// Take the acks that are there without blocking, and block
			// (in Go's netpoller, on this goroutine) only when the window
			// is full.
			_ = rc.Read(func(fd uintptr) bool {
				k, _ := syscall.Read(int(fd), acks[:len(acks)/8*8])
				if k > 0 {
					take(acks[:k])
				}
				return true
			})
			for sent+per-acked > int64(window) {
				k, err := io.ReadAtLeast(c, acks[:8], 8)
				if err != nil {
					return 0, err
				}
				take(acks[:k])
			}
		case ack > 0:
			mu.Lock()
			for sent+per-acked > int64(window) {
				cond.Wait()
			}
			mu.Unlock()
		}
		k, err := c.Write(buf)
		if err != nil {
			return 0, err
		}
		sent += int64(k / msgSize)
	}
	rate := float64(sent) / time.Since(start).Seconds()
	// End the stream and take the acks still coming, so that the reader
	// sees an end rather than a reset.
	if err := c.CloseWrite(); err != nil {
		return 0, err
	}
	if ack == 0 || self {
		_, _ = io.Copy(io.Discard, c)
	}
	return rate, nil
}
