package bench

import "testing"

func TestNumberFormatsReadNaturally(t *testing.T) {
	tests := []struct{ got, want string }{
		{grouped(0), "0"},
		{grouped(999), "999"},
		{grouped(1000), "1,000"},
		{grouped(3_456_789), "3,456,789"},
		{grouped(-1_234), "-1,234"},
		{si(1_234_567), "1.23 M"},
		{si(456_000), "456 k"},
		{si(12), "12.0"},
		{siUnit(10_000_000, "B/s"), "10.0 MB/s"},
		{duration(45), "45.0 µs"},
		{duration(1234), "1.23 ms"},
		{duration(2_500_000), "2.50 s"},
		{tickLabel(0.1 + 0.2), "0.3"},
		{siTickLabel(1_500_000), "1.5 M"},
		{percentileLabel(4), "99.99%"},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("got %q, want %q", tt.got, tt.want)
		}
	}
}
