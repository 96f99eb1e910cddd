package transport

import "context"

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
	if p.budget.gen.Load() != mark || p.reclaimIdle() {
		return nil
	}
	p.mu.Lock()
	closed, err := p.mu.closed, p.mu.err
	p.mu.Unlock()
	if err != nil {
		return err
	}
	if closed {
		return ErrClosed
	}
	select {
	case <-w:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Peer is the peer this sender sends to.
func (s *Sender) Peer() *Peer { return s.ch.peer }

// The peer budget bounds the memory of the windows of a peer's channels:
// each window's rings (window.Sender.Footprint) are charged to it when they
// grow, in Push, and given back when they shrink. Payloads retained count
// with the room their rings have grown for, so ten thousand channels that
// each once saw a burst cannot hold ten thousand bursts' worth of rings.
//
// When more than half the budget is charged it is short, and a window
// larger than twice its channel's share (budget / channels) is trimmed to
// what it retains whenever an ack frees some of it (to nothing when it
// empties). Smaller windows keep their rings: trimming every window as its
// burst is acknowledged made each next burst allocate and grow its rings
// again, and 10,000 channels of 16- and 100-byte messages moved a fifth
// fewer. A window over its share that emptied while
// the budget was not short keeps its rings for its next burst too; it is
// counted as idle, and a sender that finds the budget short and no room
// for its message takes idle rings back (reclaimIdle) before it waits, so
// that rings nobody will fill again cannot hold the budget forever.

// charge takes n bytes of the budget, or reports that they are not free.
// It looks before it takes: with the budget exhausted, producers that try
// channel after channel would otherwise bounce the counter's cache line
// between cores twice per try.
func (p *Peer) charge(n int64) bool {
	if !p.fits(n) {
		return false
	}
	if p.charged.Add(n) > int64(p.node.o.peerBudget) {
		p.charged.Add(-n)
		return false
	}
	return true
}

// fits reports whether n more bytes of the budget are free now.
func (p *Peer) fits(n int64) bool { return p.charged.Load()+n <= int64(p.node.o.peerBudget) }

// short reports whether more than half the budget is charged.
func (p *Peer) short() bool { return p.charged.Load() > int64(p.node.o.peerBudget)/2 }

// share is one channel's even share of the budget.
func (p *Peer) share() int { return p.node.o.peerBudget / int(max(p.nchannels.Load(), 1)) }

// reclaimIdle trims the idle windows (empty and over their share) when the
// budget is short, and reports whether that freed any of it. One caller
// walks the channels at a time; the others wait for the budget broadcast.
func (p *Peer) reclaimIdle() bool {
	if p.idle.Load() <= 0 || !p.short() || !p.reclaiming.CompareAndSwap(false, true) {
		return false
	}
	defer p.reclaiming.Store(false)
	p.mu.Lock()
	chans := make([]*channel, 0, len(p.mu.channels))
	for _, ch := range p.mu.channels {
		chans = append(chans, ch)
	}
	p.mu.Unlock()
	var released int
	for _, ch := range chans {
		ch.mu.Lock()
		if ch.mu.idle != 0 && !ch.mu.closed {
			released += ch.mu.win.Trim()
			p.idle.Add(-ch.mu.idle)
			ch.mu.idle = 0
		}
		ch.mu.Unlock()
	}
	if released == 0 {
		return false
	}
	p.charged.Add(-int64(released))
	p.budget.broadcast()
	return true
}
