package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"strings"
	"testing"
)

// -h lists what a command takes, with the defaults it runs with: not the
// flags it shares with others and refuses, nor another command's defaults.
func TestHelpListsTheFlagsACommandTakesWithItsDefaults(t *testing.T) {
	for _, tc := range []struct {
		cmd     string
		has     []string
		hasNone []string
	}{
		{"send", []string{"-messages", "-to", "-size"}, []string{"-duration", "-faults", "-seed", "-consume-rate", "-delivery"}},
		{"coordinate", []string{"-agents", "-parallelism"}, []string{"  -nodes int"}},
		{"sweep", []string{"-sizes", "-channel-counts", "how long to send (default 5s)", `(default "results/local/sweep")`}, []string{"  -size int", "  -channels int", "(default 10s)"}},
		{"run", []string{"-nodes", "-faults", "-duration", "(default 10s)"}, nil},
	} {
		var stderr bytes.Buffer
		err := run(context.Background(), []string{tc.cmd, "-h"}, new(bytes.Buffer), &stderr)
		if !errors.Is(err, flag.ErrHelp) {
			t.Fatalf("%s -h: %v, want flag.ErrHelp", tc.cmd, err)
		}
		help := stderr.String()
		for _, s := range tc.has {
			if !strings.Contains(help, s) {
				t.Errorf("%s -h does not say %q:\n%s", tc.cmd, s, help)
			}
		}
		for _, s := range tc.hasNone {
			if strings.Contains(help, s) {
				t.Errorf("%s -h says %q, which %s does not take:\n%s", tc.cmd, s, tc.cmd, help)
			}
		}
	}
}

func TestSweepRefusesRunsSizeAndChannels(t *testing.T) {
	for _, args := range [][]string{{"--size", "16"}, {"--channels", "3"}} {
		err := run(context.Background(), append([]string{"sweep"}, args...), new(bytes.Buffer), new(bytes.Buffer))
		if err == nil || !strings.Contains(err.Error(), "sweep: "+args[0]+" is for 'loadgen run'") {
			t.Errorf("sweep %v: %v, want a refusal", args, err)
		}
	}
}

func TestEngineFaultsNameAnUnknownKind(t *testing.T) {
	for _, s := range []string{"bogus=1", "bogus=1s"} {
		_, _, _, err := engineFaults(s, 1)
		if err == nil || !strings.Contains(err.Error(), `unknown fault "bogus"`) || !strings.Contains(err.Error(), "partition") {
			t.Errorf("engineFaults(%q): %v, want an unknown fault that lists every kind", s, err)
		}
	}
	if _, crash, kill, err := engineFaults("delay=1ms,crash=2s,kill=3s", 1); err != nil || crash.String() != "2s" || kill.String() != "3s" {
		t.Errorf("engineFaults: crash %v, kill %v, %v", crash, kill, err)
	}
}
