package window

import "testing"

func TestRingsGiveBackMemoryABurstNoLongerNeeds(t *testing.T) {
	cfg := DefaultConfig()
	s := NewSender(cfg, 0)
	payload := make([]byte, 100)
	burst := func(n int) { burstAcked(t, s, payload, n) }
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

func TestTrimFitsTheRingsToWhatIsRetained(t *testing.T) {
	s := NewSender(DefaultConfig(), 0)
	if s.Footprint() != 0 {
		t.Fatalf("a new window takes %d bytes, want 0 until the first Push", s.Footprint())
	}
	payload := make([]byte, 100)
	for i := range 1000 {
		payload[0] = byte(i)
		if _, err := s.Push(int64(i), payload); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.MarkSent(s.NextSeq()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Ack(990); err != nil {
		t.Fatal(err)
	}
	big := s.Footprint()
	freed := s.Trim()
	if freed <= 0 || s.Footprint() != big-freed {
		t.Fatalf("Trim freed %d of %d bytes, footprint now %d", freed, big, s.Footprint())
	}
	// Ten messages of 100 bytes: a 2 KiB byte ring and 32 records.
	if want := 2048 + 32*recordSize; s.Footprint() != want {
		t.Errorf("footprint %d after trimming to ten messages, want %d", s.Footprint(), want)
	}
	for seq := uint64(990); seq < 1000; seq++ {
		ts, p := s.Message(seq)
		if ts != int64(seq) || len(p) != 100 || p[0] != byte(seq) {
			t.Fatalf("Message(%d) = %d, %d bytes [%d] after Trim", seq, ts, len(p), p[0])
		}
	}
	if freed := s.Trim(); freed != 0 {
		t.Errorf("a second Trim freed %d bytes", freed)
	}
	if _, err := s.Ack(1000); err != nil {
		t.Fatal(err)
	}
	if s.Trim(); s.Footprint() != 0 {
		t.Errorf("an empty window trimmed to %d bytes, want 0", s.Footprint())
	}
	if _, err := s.Push(0, payload); err != nil || s.Footprint() != initialBytes+initialRecords*recordSize {
		t.Errorf("Push after Trim: %v, footprint %d", err, s.Footprint())
	}
}

// burstAcked pushes n copies of payload into s, sends and acknowledges them.
func burstAcked(t *testing.T, s *Sender, payload []byte, n int) {
	t.Helper()
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
