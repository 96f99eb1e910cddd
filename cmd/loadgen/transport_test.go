package main

import (
	"strings"
	"testing"
	"time"
)

func TestTransportDeliveryChoice(t *testing.T) {
	base := transportConfig{size: 100, duration: time.Second, channels: 1, connections: 1}
	for _, c := range []struct {
		delivery string
		consume  float64
		inline   bool
		err      string
	}{
		{"auto", 0, true, ""},
		{"", 0, true, ""}, // a coordinator's plan: auto
		{"auto", 1000, false, ""},
		{"inline", 0, true, ""},
		{"goroutine", 0, false, ""},
		{"goroutine", 1000, false, ""},
		{"inline", 1000, false, "cannot be combined with --consume-rate"},
		{"loop", 0, false, "--delivery must be"},
	} {
		cfg := base
		cfg.delivery, cfg.consumeRate = c.delivery, c.consume
		err := cfg.validate()
		switch {
		case c.err == "" && err != nil:
			t.Errorf("--delivery %q --consume-rate %v: %v", c.delivery, c.consume, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("--delivery %q --consume-rate %v: error %v, want one saying %q", c.delivery, c.consume, err, c.err)
		case c.err == "" && cfg.inline() != c.inline:
			t.Errorf("--delivery %q --consume-rate %v: inline %v, want %v", c.delivery, c.consume, cfg.inline(), c.inline)
		}
	}
}
