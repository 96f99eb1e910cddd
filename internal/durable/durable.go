// Package durable writes files that survive a crash of the machine: the
// directory fsync after a rename or a create, and whole files replaced
// atomically through a temporary file. The engine's store, checkpoints and
// journal and loadgen's outputs share it.
package durable

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// SyncDir fsyncs directory dir, so that the names created, renamed or
// removed in it survive a crash.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}

// MkdirAll creates dir and any missing parents, like os.MkdirAll, and with
// sync fsyncs the parent of each directory it creates, so that a crash of
// the machine cannot leave files synced inside a directory whose own name
// was lost. A directory that exists already is left as it is.
func MkdirAll(dir string, sync bool) error {
	dir = filepath.Clean(dir)
	var missing []string
	for d := dir; ; {
		fi, err := os.Stat(d)
		if err == nil {
			if !fi.IsDir() {
				return &os.PathError{Op: "mkdir", Path: d, Err: syscall.ENOTDIR}
			}
			break
		}
		if !errors.Is(err, os.ErrNotExist) {
			return err
		}
		missing = append(missing, d)
		parent := filepath.Dir(d)
		if parent == d {
			break
		}
		d = parent
	}
	for i := len(missing) - 1; i >= 0; i-- {
		d := missing[i]
		if err := os.Mkdir(d, 0o755); err != nil {
			// Made meanwhile by someone else is fine; a name that exists
			// but is no directory (a dangling symbolic link) is not.
			if fi, serr := os.Stat(d); !errors.Is(err, os.ErrExist) || serr != nil || !fi.IsDir() {
				return err
			}
		}
		if sync {
			if err := syncParent(filepath.Dir(d)); err != nil {
				return err
			}
		}
	}
	return nil
}

// syncParent is MkdirAll's SyncDir; tests see through it which
// directories were synced.
var syncParent = SyncDir

// WriteFile replaces path with what write writes, atomically: write goes
// to path+".tmp", which is fsynced, renamed over path, and the directory
// fsynced, so that after a crash path holds the old content or the new,
// whole. With sync false the fsyncs are skipped (tests, benchmarks): still
// atomic against a crash of the process, not of the machine. On an error
// before the rename the temporary file is removed and path is untouched;
// an error syncing the directory comes after the rename, when path holds
// the new content, which a crash of the machine may yet undo.
func WriteFile(path string, sync bool, write func(io.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	err = write(f)
	if err == nil && sync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return err
	}
	if sync {
		return SyncDir(filepath.Dir(path))
	}
	return nil
}
