package durable

import (
	"errors"
	"io"
	"os"
	"path/filepath"
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
