package window

import "testing"

func TestRingsGiveBackMemoryABurstNoLongerNeeds(t *testing.T) {
	cfg := DefaultConfig()
	s := NewSender(cfg, 0)
	payload := make([]byte, 100)
	burst := func(n int) {
		for range n {
			if _, err := s.Push(0, payload); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.MarkSent(s.NextSeq()); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Ack(s.NextSeq()); err != nil {
			t.Fatal(err)
		}
	}
	burst(1000)
	big := len(s.buf)
	if big < 100*1000 {
		t.Fatalf("ring of %d bytes after a burst of 100,000", big)
	}
	for range 2 * shrinkEvery {
		burst(2)
	}
	if len(s.buf) >= big/4 || len(s.recs) > 4*initialRecords {
		t.Errorf("rings of %d bytes and %d records after a long quiet spell, want them shrunk from %d bytes", len(s.buf), len(s.recs), big)
	}
	burst(1000) // and they grow again when needed
	if len(s.buf) < 100*1000 {
		t.Errorf("ring of %d bytes after a second burst", len(s.buf))
	}
}
