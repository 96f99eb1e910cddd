package journal

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func fuzzSeeds() [][]byte {
	var all []byte
	var seeds [][]byte
	for _, r := range history() {
		one, _ := AppendRecord(nil, r)
		seeds = append(seeds, one, one[:len(one)-1])
		all = append(all, one...)
	}
	huge, _ := AppendRecord(nil, &Generation{Gen: 1})
	huge[7] = 0xff // a body length far past the limit
	return append(seeds, all, huge, []byte{0, 0, 0, 0, 0, 0, 0, 0, 4})
}

// FuzzDecodeRecord decodes arbitrary bytes: it never panics, says "need
// more" only when the bytes end inside the claimed record, and what it
// decodes encodes to a record that decodes to the same value.
func FuzzDecodeRecord(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := DecodeRecord(b)
		if errors.Is(err, ErrIncomplete) {
			if len(b) >= headerLen && uint64(len(b)-headerLen) >= layout.BodyLen(b) {
				t.Fatalf("ErrIncomplete with the whole claimed record present (%d bytes)", len(b))
			}
			return
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("an error that is neither ErrIncomplete nor ErrCorrupt: %v", err)
			}
			return
		}
		if n < headerLen || n > len(b) {
			t.Fatalf("decoded %d bytes of %d", n, len(b))
		}
		again, err := AppendRecord(nil, r)
		if err != nil {
			t.Fatal(err)
		}
		r2, n2, err := DecodeRecord(again)
		if err != nil || n2 != len(again) || !reflect.DeepEqual(r, r2) {
			t.Fatalf("re-encoded %+v decodes to %+v, %d of %d bytes, %v", r, r2, n2, len(again), err)
		}
	})
}

// FuzzOpen opens a journal whose records are arbitrary bytes. Open either
// refuses it with ErrCorrupt or keeps a prefix of whole records, cuts the
// rest, and goes on appending.
func FuzzOpen(f *testing.F) {
	for _, s := range fuzzSeeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		path := filepath.Join(t.TempDir(), "journal")
		if err := os.WriteFile(path, append([]byte(fileMagic), b...), 0o644); err != nil {
			t.Fatal(err)
		}
		j, err := Open(path, Options{NoSync: true})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open: %v, want ErrCorrupt or success", err)
			}
			return
		}
		defer j.Close()
		if j.off+j.Cut() != int64(len(fileMagic)+len(b)) {
			t.Fatalf("kept %d + cut %d != file %d", j.off, j.Cut(), len(fileMagic)+len(b))
		}
		st := j.State()
		var next Record = &Job{Shape: "x"}
		if st.Job != nil {
			// It restores the last checkpoint, which is never below the
			// floor a commit set.
			next = &Generation{Gen: st.Gen + 1, Restore: st.Checkpoint, HasRestore: st.HasCheckpoint}
		}
		if err := j.Append(next); err != nil {
			t.Fatalf("Append after Open: %v", err)
		}
		got, err := Read(path)
		if err != nil {
			t.Fatalf("Read after Append: %v", err)
		}
		if err := st.apply(next); err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, st) {
			t.Fatalf("state after Append\n got %+v\nwant %+v", got, st)
		}
	})
}
