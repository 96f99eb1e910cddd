package transport

import (
	"context"
	"time"
)

// CreditMark returns a mark to pass to [Peer.WaitCredit]: take it before
// trying the channels, so that credit freed while trying is not missed.
func (p *Peer) CreditMark() uint64 { return p.budget.gen.Load() }

// WaitCredit blocks until an acknowledgement from the peer may have freed
// credit on one of its channels since mark was taken, the peer is closed,
// or ctx ends. A producer that feeds many channels with TrySend calls it
// when none of them had credit, instead of blocking in Send on one channel
// while others could take messages:
//
//	for {
//		mark := p.CreditMark()
//		if sentAny := tryEveryChannel(); !sentAny {
//			p.WaitCredit(ctx, mark)
//		}
//	}
//
// Wake-ups may be spurious. Safe for concurrent use.
func (p *Peer) WaitCredit(ctx context.Context, mark uint64) error {
	w := p.budget.wait()
	defer p.budget.done()
	if p.budget.gen.Load() != mark || p.reclaimIdle(int64(p.node.o.peerBudget)/64) {
		return nil
	}
	p.mu.Lock()
	closed, err := p.mu.closed, p.Err()
	p.mu.Unlock()
	if err != nil {
		return err
	}
	if closed {
		return ErrClosed
	}
	if p.short() { // quiet windows may hold the budget: the node's timer looks at them
		p.awaitReclaim(int64(p.node.o.peerBudget) / 64)
	}
	start := p.node.now()
	p.credit.begin(start)
	defer func() {
		end := p.node.now()
		p.credit.end(end)
		p.blocked.Add(end - start)
	}()
	select {
	case <-w:
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// Peer is the peer this sender sends to.
func (s *Sender) Peer() *Peer { return s.ch.peer }

// The peer budget bounds the memory of the windows of a peer's channels:
// each window's rings (window.Sender.Footprint) are charged to it when they
// grow, in Push, and given back when they shrink. Payloads retained count
// with the room their rings have grown for, so ten thousand channels that
// each once saw a burst cannot hold ten thousand bursts' worth of rings.
//
// A window keeps its rings as its messages are acknowledged, so that its
// next burst fills them again without charging the budget or copying.
// Trimming a window over twice its channel's share to what it retained at
// each ack, while more than half the budget was charged, was measured and
// dropped: with bursts larger than that (10,000 channels), every burst grew
// its rings again doubling by doubling, charging the budget and re-packing
// each time, and failing charges cut bursts short (10,000 channels of 1 KiB
// at a 48 MiB budget: 0.93-0.97 M msgs/s with the trim, 1.24-1.31 M
// without; and without it smaller budgets did better still). A window over its share
// that empties is counted as idle, and a sender that finds the budget short
// and no room for its message takes idle rings back (reclaimIdle) before it
// waits, so that rings nobody will fill again cannot hold the budget
// forever. Empty windows within their share keep their rings too, unless
// the budget has stood still (no ack freed anything) for reclaimEvery while
// a sender waited for it: quiet channels can hold all of it between them.
// Senders waiting for the budget do not look again themselves: the node's
// timer looks for them all (reclaimForWaiters), and wakes them if it freed
// anything.

// charge takes n bytes of the budget, or reports that they are not free.
// It never takes them even for a moment when they are not free: with the
// budget exhausted, producers trying channel after channel would otherwise
// bounce the counter's cache line between cores twice per try, and Stats
// would see the budget passed.
func (p *Peer) charge(n int64) bool {
	budget := int64(p.node.o.peerBudget)
	for {
		cur := p.charged.Load()
		if cur+n > budget {
			return false
		}
		if p.charged.CompareAndSwap(cur, cur+n) {
			return true
		}
	}
}

// fits reports whether n more bytes of the budget are free now.
func (p *Peer) fits(n int64) bool { return p.charged.Load()+n <= int64(p.node.o.peerBudget) }

// short reports whether more than half the budget is charged.
func (p *Peer) short() bool { return p.charged.Load() > int64(p.node.o.peerBudget)/2 }

// share is one channel's even share of the budget.
func (p *Peer) share() int { return p.node.o.peerBudget / int(max(p.nchannels.Load(), 1)) }

// reclaimEvery is how long the budget must have stood still (no ack freed
// anything) before a sender short of it takes back the rings of empty
// windows within their share too. Their rings are small, and while acks
// come the budget turns over without that; but quiet channels can hold
// all of it between them, and no ack will come to make them give it back.
// Under load with 10,000 channels the budget stood still for 10 ms about
// five times a second (each time trimming rings the next bursts grew
// again); 100 ms keeps that rare and frees a stuck sender within 0.2 s.
const reclaimEvery = 100 * time.Millisecond

// reclaimIdle takes ring memory back from empty windows when the budget is
// short and reports whether it freed any: from every window counted idle
// (over its share), and, when the budget has stood still for reclaimEvery,
// from the other empty windows until need bytes are freed. One caller
// looks at a time; a channel whose lock is busy is not empty for long and
// is skipped.
func (p *Peer) reclaimIdle(need int64) bool {
	if !p.short() {
		return false
	}
	deep := false
	now, last := p.node.now(), p.lookedAt.Load()
	if need > 0 && now-last >= int64(reclaimEvery) && p.lookedAt.CompareAndSwap(last, now) {
		// This caller looks: nothing freed since the last look?
		gen := p.budget.gen.Load()
		deep = p.lookedGen.Swap(gen) == gen
	}
	if (p.idle.Load() <= 0 && !deep) || !p.reclaiming.CompareAndSwap(false, true) {
		return false
	}
	defer p.reclaiming.Store(false)
	var released int64
	p.mu.Lock()
	for _, ch := range p.mu.channels {
		if !ch.mu.TryLock() {
			continue
		}
		src := ch.mu.src
		if !ch.mu.closed && (ch.mu.idle != 0 || deep && src.Drained()) {
			released += int64(src.Trim())
			p.idle.Add(-ch.mu.idle)
			ch.mu.idle = 0
		}
		ch.mu.Unlock()
		if p.idle.Load() <= 0 && (!deep || released >= need) {
			break
		}
	}
	p.mu.Unlock()
	if released == 0 {
		return false
	}
	p.charged.Add(-released)
	p.budget.broadcast()
	return true
}

// awaitReclaim records that a sender is about to wait for need bytes of
// the budget, which quiet windows may hold while no ack will wake it: the
// node's timer looks at them on its behalf (reclaimForWaiters). The caller
// counts among the budget's waiters already, so that the timer, which
// forgets the need once nobody waits, cannot forget this one.
func (p *Peer) awaitReclaim(need int64) {
	p.reclaim.Lock()
	p.reclaim.need = max(p.reclaim.need, need)
	p.reclaim.Unlock()
}

// reclaimForWaiters takes back the rings of quiet windows for the senders
// waiting for the budget, as much as the neediest of them asked for since
// nobody waited; reclaimIdle wakes them if it freed any. It runs at each of
// the timer's housekeeping rounds, and reclaimIdle looks at windows within
// their share once a reclaimEvery at most. Timer goroutine only. One look
// serves every waiting sender: with a timer each, every sender woke each
// reclaimEvery to look, and found that another had (16,000 senders blocked
// on one peer kept 0.8 of a core busy, and an Abort of 64,000 channels
// with a sender blocked on each ran against 640,000 wake-ups a second).
func (p *Peer) reclaimForWaiters() {
	p.reclaim.Lock()
	if p.budget.waiters.Load() == 0 {
		p.reclaim.need = 0
	}
	need := p.reclaim.need
	p.reclaim.Unlock()
	if need > 0 {
		p.reclaimIdle(need)
	}
}
