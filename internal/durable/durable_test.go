package durable

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

func TestWriteFileReplacesWholeOrNotAtAll(t *testing.T) {
	for _, sync := range []bool{true, false} {
		path := filepath.Join(t.TempDir(), "out")
		if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := WriteFile(path, sync, func(w io.Writer) error {
			_, err := io.WriteString(w, "new content")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if b, _ := os.ReadFile(path); string(b) != "new content" {
			t.Fatalf("sync %v: file holds %q, want the new content", sync, b)
		}

		// A writer that fails halfway leaves the file as it was and no
		// temporary file behind.
		boom := errors.New("boom")
		err := WriteFile(path, sync, func(w io.Writer) error {
			_, _ = io.WriteString(w, "half")
			return boom
		})
		if !errors.Is(err, boom) {
			t.Fatalf("sync %v: error %v, want the writer's", sync, err)
		}
		if b, _ := os.ReadFile(path); string(b) != "new content" {
			t.Fatalf("sync %v: after a failed write the file holds %q, want it untouched", sync, b)
		}
		if _, err := os.Stat(path + ".tmp"); !os.IsNotExist(err) {
			t.Fatalf("sync %v: the temporary file is left behind (stat: %v)", sync, err)
		}
	}
}

func TestWriteFileAndSyncDirFailInAMissingDirectory(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "no", "such")
	if err := WriteFile(filepath.Join(missing, "out"), true, func(io.Writer) error { return nil }); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("WriteFile into a missing directory: %v, want ErrNotExist", err)
	}
	if err := SyncDir(missing); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("SyncDir of a missing directory: %v, want ErrNotExist", err)
	}
}

// MkdirAll makes every missing directory and fsyncs the parent of each it
// made, and only those; a directory that exists is left alone, and a file
// in the way is an error.
func TestMkdirAllSyncsTheParentOfEachDirectoryItMakes(t *testing.T) {
	root := t.TempDir()
	var synced []string
	syncParent = func(dir string) error { synced = append(synced, dir); return SyncDir(dir) }
	defer func() { syncParent = SyncDir }()

	dir := filepath.Join(root, "a", "b", "c")
	if err := MkdirAll(dir, true); err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("%s was not made: %v", dir, err)
	}
	want := []string{root, filepath.Join(root, "a"), filepath.Join(root, "a", "b")}
	if !slices.Equal(synced, want) {
		t.Fatalf("synced %q, want the parents of the three directories made, %q", synced, want)
	}
	synced = nil
	if err := MkdirAll(filepath.Join(root, "a", "b", "d"), true); err != nil || !slices.Equal(synced, []string{filepath.Join(root, "a", "b")}) {
		t.Fatalf("one directory more: err %v, synced %q", err, synced)
	}
	synced = nil
	if err := MkdirAll(dir, true); err != nil || len(synced) != 0 {
		t.Fatalf("an existing directory: err %v, synced %q", err, synced)
	}
	if err := MkdirAll(filepath.Join(root, "e"), false); err != nil || len(synced) != 0 {
		t.Fatalf("without sync: err %v, synced %q", err, synced)
	}
	file := filepath.Join(root, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := MkdirAll(filepath.Join(file, "g"), true); err == nil {
		t.Fatal("MkdirAll made a directory under a file")
	}
}

// A name that exists but is not a directory, such as a symbolic link to a
// volume that is not mounted, is an error, as with os.MkdirAll; MkdirAll
// must not report success for a directory that does not exist.
func TestMkdirAllRefusesADanglingSymlink(t *testing.T) {
	root := t.TempDir()
	link := filepath.Join(root, "checkpoints")
	if err := os.Symlink(filepath.Join(root, "unmounted", "checkpoints"), link); err != nil {
		t.Skipf("no symbolic links here: %v", err)
	}
	err := MkdirAll(link, true)
	if err == nil {
		_, serr := os.Stat(link)
		t.Fatalf("MkdirAll of a dangling symlink succeeded, and then stat says %v", serr)
	}
	if !errors.Is(err, os.ErrExist) {
		t.Fatalf("MkdirAll of a dangling symlink: %v, want an error matching ErrExist", err)
	}
}
