package main

import (
	"bytes"
	"context"
	"encoding/xml"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestSweepRunsEveryCombinationAndChartsIt(t *testing.T) {
	dir := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := sweepCmd(context.Background(), []string{"--sizes", "16,64", "--channel-counts", "1,3",
		"--duration", "200ms", "--out", dir}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("sweep: %v\n%s", err, stderr.String())
	}
	for _, sub := range []string{"size16-ch1", "size64-ch1", "size16-ch3", "size64-ch3"} {
		if _, err := os.Stat(filepath.Join(dir, sub, "report.json")); err != nil {
			t.Errorf("no report for %s: %v", sub, err)
		}
	}
	svg, err := os.ReadFile(filepath.Join(dir, "sweep.svg"))
	if err != nil {
		t.Fatal(err)
	}
	if err := xml.Unmarshal(svg, new(struct{})); err != nil {
		t.Errorf("sweep.svg is not XML: %v", err)
	}
	if md := stdout.String(); strings.Count(md, "| 0 | 0 |") != 4 {
		t.Errorf("the summary does not show four runs with nothing lost or repeated:\n%s", md)
	}
}

func TestSweepRefusesBadLists(t *testing.T) {
	for _, args := range [][]string{
		{"--sizes", "16,x"},
		{"--sizes", ""},
		{"--channel-counts", "0"},
		{"--sizes", "8"}, // below the 16 bytes a loadgen payload needs
	} {
		err := sweepCmd(context.Background(), append(args, "--duration", "100ms", "--out", t.TempDir()), &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil {
			t.Errorf("sweep %v succeeded", args)
		}
	}
}

// A size or channel count out of range is refused before the first run,
// naming sweep's own flag: it was found only when the sweep reached it,
// after every run before it, and the error named run's --size or
// --channels, which sweep refuses.
func TestSweepRefusesAValueOutOfRangeBeforeRunning(t *testing.T) {
	for _, c := range []struct {
		sizes, counts, want string
	}{
		{"100,2000000", "1", "--sizes: 2000000"},
		{"100", "1,70000", "--channel-counts: 70000"},
	} {
		dir := t.TempDir()
		err := sweepCmd(context.Background(), []string{"--sizes", c.sizes, "--channel-counts", c.counts,
			"--duration", "100ms", "--out", dir}, &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("sweep --sizes %s --channel-counts %s: error %v, want one saying %q", c.sizes, c.counts, err, c.want)
		}
		if runs, _ := os.ReadDir(dir); len(runs) > 0 {
			t.Errorf("sweep --sizes %s --channel-counts %s ran %d combination(s) before refusing", c.sizes, c.counts, len(runs))
		}
	}
}

// A size or channel count given twice is refused before the first run,
// naming the flag and the value: the sweep ran that combination twice into
// the same directory, the second run's report overwriting the first's, and
// charted both. A repeated value is most likely a slip (100,100 for
// 100,1000); dropping it quietly would hide that.
func TestSweepRefusesAValueGivenTwice(t *testing.T) {
	for _, c := range []struct {
		sizes, counts, want string
	}{
		{"100,100", "1", "--sizes: 100 is given twice"},
		{"16,100,0100", "1", "--sizes: 100 is given twice"},
		{"100", "1,3,1", "--channel-counts: 1 is given twice"},
	} {
		dir := t.TempDir()
		var stderr bytes.Buffer
		err := sweepCmd(t.Context(), []string{"--sizes", c.sizes, "--channel-counts", c.counts,
			"--duration", "100ms", "--out", dir}, &bytes.Buffer{}, &stderr)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("sweep --sizes %s --channel-counts %s: error %v, want one saying %q", c.sizes, c.counts, err, c.want)
		}
		if runs, _ := os.ReadDir(dir); len(runs) > 0 || strings.Contains(stderr.String(), "loadgen sweep:") {
			t.Errorf("sweep --sizes %s --channel-counts %s ran %d combination(s) before refusing:\n%s", c.sizes, c.counts, len(runs), stderr.String())
		}
	}
}

// An interrupted sweep summarizes the runs it made, the last cut short,
// and fails saying it was interrupted, instead of ending with a bare
// "context canceled" and no summary.
func TestAnInterruptedSweepSummarizesItsRunsAndFails(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	progress := &syncBuffer{}
	go func() { // interrupt once the second run shows it is sending (each prints t=1s once)
		for strings.Count(progress.String(), "t=1s") < 2 && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		cancel()
	}()
	dir := t.TempDir()
	var stdout bytes.Buffer
	err := sweepCmd(ctx, []string{"--sizes", "16,64,100", "--channel-counts", "1", "--rate", "20000", "--duration", "3s", "--out", dir}, &stdout, progress)
	if !errors.Is(err, errInterrupted) || exitCode(err) != 1 {
		t.Fatalf("an interrupted sweep returned %v (exit status %d), want errInterrupted (1)", err, exitCode(err))
	}
	if want := "after 2 of 3 runs"; !strings.Contains(err.Error(), want) {
		t.Errorf("error %q does not say %q", err, want)
	}
	for _, f := range []string{"sweep.json", "sweep.md", "size16-ch1/report.json", "size64-ch1/report.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("no %s: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "size100-ch1")); err == nil {
		t.Error("the run after the interrupt was made")
	}
}
