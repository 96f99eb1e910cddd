package engine

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// lockName is the lock file a worker holds in its directory.
const lockName = "LOCK"

// lockDir takes the exclusive lock of a worker directory, waiting up to
// wait for a previous holder to let go: the worker process of a coordinator
// that was killed ends when its control pipe closes, and until it has, it
// may still append to the logs the new worker is about to recover. The
// kernel drops the lock when its process dies.
func lockDir(dir string, wait time.Duration) (*os.File, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(wait)
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) || time.Now().After(deadline) {
			f.Close()
			if errors.Is(err, syscall.EWOULDBLOCK) {
				return nil, fmt.Errorf("engine: worker directory %s is still in use by another worker after %v", dir, wait)
			}
			return nil, fmt.Errorf("engine: locking %s: %w", dir, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
