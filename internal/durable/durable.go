// Package durable writes files that survive a crash of the machine: the
// directory fsync after a rename or a create, and whole files replaced
// atomically through a temporary file. The engine's store, checkpoints and
// journal and loadgen's outputs share it.
package durable

import (
	"io"
	"os"
	"path/filepath"
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

// WriteFile replaces path with what write writes, atomically: write goes
// to path+".tmp", which is fsynced, renamed over path, and the directory
// fsynced, so that after a crash path holds the old content or the new,
// whole. With sync false the fsyncs are skipped (tests, benchmarks): still
// atomic against a crash of the process, not of the machine. On an error
// the temporary file is removed and path is untouched.
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
