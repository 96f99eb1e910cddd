package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
)

// Kill points let a test SIGKILL a worker process at a named point of its
// work, where a chaos driver's kill from outside is unlikely to land:
// [WorkerConfig.KillAt] "point:n" makes the worker kill its own process the
// nth time it reaches point, once in the life of its directory (a marker
// file there disarms the point in the processes that replace it). The
// points:
//
//   - checkpoint-after-log-sync: in a checkpoint, after the source logs were
//     synced and before any task's checkpoint is saved;
//   - checkpoint-after-save: after every task of the node saved its
//     checkpoint, before the coordinator hears of it (and commits);
//   - commit: when the coordinator's commit arrives, before any log
//     segment is deleted.
var killPoints = []string{"checkpoint-after-log-sync", "checkpoint-after-save", "commit"}

// ErrKillPoint means a malformed WorkerConfig.KillAt.
var ErrKillPoint = errors.New("engine: bad kill point")

type killPoint struct {
	name   string
	n      int64
	marker string
	count  atomic.Int64
}

// parseKillPoint reads "point:n" for a worker whose directory is dir; nil
// when s is empty or the point already fired for dir.
func parseKillPoint(s, dir string) (*killPoint, error) {
	if s == "" {
		return nil, nil
	}
	name, ns, ok := strings.Cut(s, ":")
	n, err := strconv.ParseInt(ns, 10, 64)
	known := false
	for _, p := range killPoints {
		known = known || p == name
	}
	if !ok || err != nil || n < 1 || !known {
		return nil, fmt.Errorf("%w %q: want point:n with n >= 1 and point one of %s", ErrKillPoint, s, strings.Join(killPoints, ", "))
	}
	kp := &killPoint{name: name, n: n, marker: filepath.Join(dir, "killed-at-"+name)}
	if _, err := os.Stat(kp.marker); err == nil {
		return nil, nil
	}
	return kp, nil
}

// reached kills this process if it is the nth arrival at the armed point.
func (w *Worker) reached(point string) {
	kp := w.killAt
	if kp == nil || kp.name != point || kp.count.Add(1) != kp.n {
		return
	}
	if err := os.WriteFile(kp.marker, nil, 0o644); err != nil {
		w.log.Error("engine: kill point: writing its marker", "err", err)
		return
	}
	w.log.Warn("engine: kill point reached: SIGKILL", "point", point)
	err := syscall.Kill(os.Getpid(), syscall.SIGKILL)
	w.log.Error("engine: kill point: SIGKILL failed", "err", err)
	os.Exit(137)
}
