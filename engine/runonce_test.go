package engine_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// TestASecondRunFailsAtOnceSayingACoordinatorRunsOnce: a Coordinator runs
// one job once. Run called again, after the first returned, must fail at
// once with an error that says so, and start no worker: it used to make a
// second set of workers, then try to restart the first run's closed ones
// on the directories the new ones had locked, and fail 10 s later saying
// a worker directory was still in use by another worker.
func TestASecondRunFailsAtOnceSayingACoordinatorRunsOnce(t *testing.T) {
	c, err := engine.NewCoordinator(sumJob(500), engine.Config{Dir: filepath.Join(t.TempDir(), "data"), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*slow*time.Second)
	defer cancel()
	if _, err := c.Run(ctx); err != nil {
		t.Fatalf("first run: %v", err)
	}
	res, err := c.Run(ctx)
	if err == nil || !strings.Contains(err.Error(), "runs once") {
		t.Fatalf("second run returned %v, %v; want an error saying a Coordinator runs once", res, err)
	}
}
