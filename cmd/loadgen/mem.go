package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sluicehq/sluice/transport"
)

// memSampler reads the process's resident set size once a second, so a
// report can show that memory stays flat under load, and with a sending
// node the memory its windows take against its peer budget.
type memSampler struct {
	stopc chan struct{}
	wg    sync.WaitGroup
	tx    *transport.Node // nil: no windows to sample
	mu    sync.Mutex
	rss   []int64 // KiB, one per second
	win   int64   // the most window memory sampled, bytes
}

func startMemSampler(tx *transport.Node) *memSampler {
	m := &memSampler{stopc: make(chan struct{}), tx: tx}
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-t.C:
				kb, ok := procStatusKiB("VmRSS")
				win, _ := m.windows()
				m.mu.Lock()
				if ok {
					m.rss = append(m.rss, kb)
				}
				m.win = max(m.win, win)
				m.mu.Unlock()
			case <-m.stopc:
				return
			}
		}
	}()
	return m
}

// stop ends sampling and describes what it saw: the peak, and the first
// and second half of the run.
func (m *memSampler) stop() string {
	close(m.stopc)
	m.wg.Wait()
	peak, _ := procStatusKiB("VmHWM")
	var b strings.Builder
	fmt.Fprintf(&b, "peak RSS %.1f MiB", float64(peak)/1024)
	if n := len(m.rss); n >= 2 {
		half := func(s []int64) float64 {
			var mx int64
			for _, v := range s {
				mx = max(mx, v)
			}
			return float64(mx) / 1024
		}
		fmt.Fprintf(&b, "; largest RSS in the first half of sending %.1f MiB, in the second half %.1f MiB; RSS by second (MiB):", half(m.rss[:n/2]), half(m.rss[n/2:]))
		for _, v := range m.rss {
			fmt.Fprintf(&b, " %.0f", float64(v)/1024)
		}
	}
	if m.tx != nil {
		win, budget := m.windows()
		m.win = max(m.win, win)
		fmt.Fprintf(&b, "; the sender's windows took at most %.1f MiB of the %.0f MiB peer budget (sampled each second)",
			float64(m.win)/(1<<20), float64(budget)/(1<<20))
	}
	return b.String()
}

// windows returns the memory the sending node's windows take now, over all
// its peers, and its peer budget.
func (m *memSampler) windows() (bytes int64, budget int) {
	if m.tx == nil {
		return 0, 0
	}
	for _, p := range m.tx.Stats().Peers {
		bytes += p.WindowBytes
		budget = p.Budget
	}
	return bytes, budget
}

// procStatusKiB reads a "Name:  123 kB" line of /proc/self/status.
func procStatusKiB(name string) (int64, bool) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || k != name {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		return n, err == nil
	}
	return 0, false
}
