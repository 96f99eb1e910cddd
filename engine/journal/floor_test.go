package journal

import (
	"errors"
	"path/filepath"
	"testing"
)

// TestTheFloorIsTheHighestCommitAndBoundsEveryLaterRestore: the floor is
// the highest Keep ever committed, however a later commit keeps less, and
// a generation may restore a checkpoint at the floor but not one below.
func TestTheFloorIsTheHighestCommitAndBoundsEveryLaterRestore(t *testing.T) {
	recs := []Record{
		&Job{Shape: "a*1", Nodes: 1, Placement: []int{0}},
		&Generation{Gen: 1},
		&Checkpoint{Gen: 1, Ts: 5},
		&Checkpoint{Gen: 1, Ts: 9},
		&Commit{Gen: 1, Keep: 9},
		&Checkpoint{Gen: 1, Ts: 12},
		&Commit{Gen: 1, Keep: 5}, // keeps less than the floor: the floor stays 9
	}
	path := filepath.Join(t.TempDir(), "journal")
	writeJournal(t, path, recs)
	j, err := Open(path, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer j.Close()
	if st := j.State(); !st.HasFloor || st.Floor != 9 {
		t.Fatalf("floor %d (has %v), want 9, the highest commit", st.Floor, st.HasFloor)
	}
	if err := j.Append(&Generation{Gen: 2, Restore: 8, HasRestore: true}); !errors.Is(err, ErrOrder) {
		t.Fatalf("a generation restoring 8, one below the floor 9: got %v, want ErrOrder", err)
	}
	if err := j.Append(&Generation{Gen: 2, Restore: 9, HasRestore: true}); err != nil {
		t.Fatalf("a generation restoring the floor itself: %v", err)
	}
}
