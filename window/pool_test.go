package window

import "testing"

// A Sender whose window grows, empties and is trimmed again and again takes
// its rings from the pool once it is warm: no allocation per cycle, and the
// pool never holds more than its bound.
func TestPoolReusesRingsWithinItsBound(t *testing.T) {
	pool := NewPool(256 << 10)
	s := NewSender(DefaultConfig(), 0)
	s.UsePool(pool)
	payload := make([]byte, 1000)
	cycle := func() {
		burstAcked(t, s, payload, 64)
		s.Trim()
	}
	cycle()
	if allocs := testing.AllocsPerRun(100, cycle); allocs != 0 {
		t.Errorf("a warm grow-and-trim cycle allocated %.1f times, want 0", allocs)
	}
	if held := pool.Held(); held == 0 || held > 256<<10 {
		t.Errorf("the pool holds %d bytes after the cycles, want some, at most %d", held, 256<<10)
	}

	// Without a pool the same cycle allocates every ring again.
	s = NewSender(DefaultConfig(), 0)
	if allocs := testing.AllocsPerRun(10, cycle); allocs == 0 {
		t.Error("without a pool the cycle allocated nothing: the test does not exercise the rings")
	}
}

// A pool at its bound drops rings of the size it holds most of to take
// another, and never takes a ring larger than the whole bound.
func TestPoolDropsToStayWithinItsBound(t *testing.T) {
	p := NewPool(4096)
	for range 8 {
		p.putBytes(make([]byte, 512))
	}
	if p.Held() != 4096 {
		t.Fatalf("held %d after eight 512-byte rings, want 4096", p.Held())
	}
	p.putBytes(make([]byte, 2048))
	if p.Held() != 4096 || len(p.mu.bytes[11]) != 1 || len(p.mu.bytes[9]) != 4 {
		t.Fatalf("held %d with %d rings of 2 KiB and %d of 512 B; want 4096, 1 and 4", p.Held(), len(p.mu.bytes[11]), len(p.mu.bytes[9]))
	}
	p.putBytes(make([]byte, 8192))
	if p.Held() != 4096 || len(p.mu.bytes[13]) != 0 {
		t.Errorf("a ring over the bound was taken: held %d", p.Held())
	}
	p.putBytes(make([]byte, 300)) // not a power of two: not pooled
	if p.Held() != 4096 {
		t.Errorf("a ring of no size class was taken: held %d", p.Held())
	}
	if b := p.getBytes(2048); len(b) != 2048 || p.Held() != 2048 {
		t.Errorf("get 2048 returned %d bytes and left %d held, want 2048 and 2048", len(b), p.Held())
	}
	if r := p.getRecords(16); len(r) != 16 {
		t.Errorf("getRecords(16) returned %d records", len(r))
	}
}
