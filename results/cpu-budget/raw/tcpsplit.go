//go:build ignore

// The plain-TCP ceiling (bench.PackedWriter into bench.ReadPacked, 100-byte
// messages) across two processes, with each side's CPU per message: which
// side of plain TCP uses how much of a core, to set beside the transport's
// sending process. Run from the repository root:
//
//	go run results/cpu-budget/raw/tcpsplit.go recv & sleep 1; go run results/cpu-budget/raw/tcpsplit.go send; wait
//
// (or build it once with go build -o /tmp/tcpsplit results/cpu-budget/raw/tcpsplit.go).
// See results/cpu-budget/README.md, "Where a sending process's time goes".
package main

import (
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/bench"
)

const (
	addr = "127.0.0.1:7100"
	size = 100
	n    = 100_000_000
)

// cpu is the CPU time (user and system) this process has used.
func cpu() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		panic(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func main() {
	if len(os.Args) != 2 || (os.Args[1] != "send" && os.Args[1] != "recv") {
		fmt.Fprintln(os.Stderr, "usage: tcpsplit send|recv")
		os.Exit(2)
	}
	if os.Args[1] == "recv" {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			panic(err)
		}
		c, err := ln.Accept()
		if err != nil {
			panic(err)
		}
		c0, t0 := cpu(), time.Now()
		d, err := bench.ReadPacked(c, size)
		el := time.Since(t0)
		fmt.Printf("recv: %d msgs (exactly once: %v, %v) %.1f M msgs/s, CPU %.1f ns/msg\n", d.Delivered,
			d.ExactlyOnce(n), err, float64(d.Delivered)/el.Seconds()/1e6, float64(cpu()-c0)/float64(d.Delivered))
		return
	}
	c, err := net.Dial("tcp", addr)
	if err != nil {
		panic(err)
	}
	w, err := bench.NewPackedWriter(c, size)
	if err != nil {
		panic(err)
	}
	c0, t0 := cpu(), time.Now()
	for range n {
		if err := w.Add(0); err != nil {
			panic(err)
		}
	}
	if err := w.Flush(); err != nil {
		panic(err)
	}
	el := time.Since(t0)
	fmt.Printf("send: %.1f M msgs/s, CPU %.1f ns/msg\n", float64(n)/el.Seconds()/1e6, float64(cpu()-c0)/float64(n))
	c.Close()
}
