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
	if p.budget.gen.Load() != mark {
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
