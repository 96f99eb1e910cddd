package engine

import (
	"testing"
	"time"
)

// TestRestartPolicyDefaultsEachZeroField: every field left zero takes its
// default on its own, and a zero backoff stays on the right side of the
// one that is set.
func TestRestartPolicyDefaultsEachZeroField(t *testing.T) {
	const ms = time.Millisecond
	for _, tc := range []struct {
		name      string
		given     RestartPolicy
		effective RestartPolicy
	}{
		{"nothing set is the default policy", RestartPolicy{}, DefaultRestartPolicy()},
		{"MaxRestarts alone keeps it and takes the rest",
			RestartPolicy{MaxRestarts: 5}, RestartPolicy{MaxRestarts: 5, Window: time.Minute, MinBackoff: 10 * ms, MaxBackoff: time.Second}},
		{"Window alone keeps it and takes the rest",
			RestartPolicy{Window: time.Hour}, RestartPolicy{MaxRestarts: 10, Window: time.Hour, MinBackoff: 10 * ms, MaxBackoff: time.Second}},
		{"a MaxBackoff below the default MinBackoff lowers it",
			RestartPolicy{MaxBackoff: 2 * ms}, RestartPolicy{MaxRestarts: 10, Window: time.Minute, MinBackoff: 2 * ms, MaxBackoff: 2 * ms}},
		{"a MaxBackoff above the default MinBackoff keeps it",
			RestartPolicy{MaxBackoff: 5 * time.Second}, RestartPolicy{MaxRestarts: 10, Window: time.Minute, MinBackoff: 10 * ms, MaxBackoff: 5 * time.Second}},
		{"a MinBackoff above the default MaxBackoff raises it",
			RestartPolicy{MinBackoff: 3 * time.Second}, RestartPolicy{MaxRestarts: 10, Window: time.Minute, MinBackoff: 3 * time.Second, MaxBackoff: 3 * time.Second}},
		{"a MinBackoff below the default MaxBackoff keeps it",
			RestartPolicy{MinBackoff: ms}, RestartPolicy{MaxRestarts: 10, Window: time.Minute, MinBackoff: ms, MaxBackoff: time.Second}},
		{"a full policy is kept",
			RestartPolicy{1, time.Second, ms, ms}, RestartPolicy{1, time.Second, ms, ms}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.given.Validate(); err != nil {
				t.Fatalf("Validate: %v", err)
			}
			if got := tc.given.withDefaults(); got != tc.effective {
				t.Fatalf("%+v became %+v, want %+v", tc.given, got, tc.effective)
			}
		})
	}
}
