package bench

import (
	"strings"
	"testing"
	"time"
)

func TestParseStatCPU(t *testing.T) {
	// Fields 3 to 15 of proc(5): state ppid pgrp session tty_nr tpgid flags
	// minflt cminflt majflt cmajflt utime stime, then more that are ignored.
	const rest = "S 1 2 3 4 5 6 7 8 9 10 %s %s 0 0 20 0 4 0 100 0 0"
	line := func(comm, utime, stime string) []byte {
		return []byte("4242 (" + comm + ") " + strings.Replace(strings.Replace(rest, "%s", utime, 1), "%s", stime, 1) + "\n")
	}
	for _, tc := range []struct {
		name string
		stat []byte
		want time.Duration
	}{
		{"plain", line("loadgen", "250", "50"), 3 * time.Second},
		{"name with spaces and parentheses", line("a) b (c", "1", "2"), 30 * time.Millisecond},
		{"nothing used yet", line("x", "0", "0"), 0},
	} {
		got, err := parseStatCPU(tc.stat)
		if err != nil || got != tc.want {
			t.Errorf("%s: got %v, %v; want %v", tc.name, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		stat []byte
		msg  string
	}{
		{"empty", nil, "without a command name"},
		{"no command name", []byte("4242 loadgen S 1 2 3"), "without a command name"},
		{"cut short", []byte("4242 (loadgen) S 1 2 3 4 5 6 7 8 9 10 11"), "fields after the command name"},
		{"utime not a number", line("x", "ten", "0"), `CPU time "ten"`},
		{"negative", line("x", "-1", "0"), `CPU time "-1"`},
		{"beyond 63 bits", line("x", "9223372036854775808", "0"), "CPU time"},
		{"ticks overflow a Duration", line("x", "9223372036854775", "0"), "out of range"},
	} {
		if _, err := parseStatCPU(tc.stat); err == nil || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: got %v, want an error saying %q", tc.name, err, tc.msg)
		}
	}
}

func FuzzParseStatCPU(f *testing.F) {
	f.Add([]byte("1 (init) S 0 1 1 0 -1 4194560 100 200 3 4 17 29 0 0 20 0 1 0 5 0 0"))
	f.Add([]byte("7 (a) b) R 1 2 3 4 5 6 7 8 9 10 11 12"))
	f.Add([]byte(")"))
	f.Fuzz(func(t *testing.T, stat []byte) {
		d, err := parseStatCPU(stat)
		if err == nil && (d < 0 || d%(time.Second/userHZ) != 0) {
			t.Fatalf("parseStatCPU(%q) = %v: not a whole number of ticks at or above 0", stat, d)
		}
	})
}
