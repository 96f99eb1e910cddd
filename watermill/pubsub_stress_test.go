//go:build stress

package watermill_test

import (
	"testing"

	"github.com/ThreeDotsLabs/watermill/pubsub/tests"
)

// TestPubSubStress runs the universal suite STRESS_TEST_COUNT times (default
// 10) in parallel. Like Watermill's own stress tests it is built only with
// the tag "stress", which also makes the suite's timeouts five times longer
// and doubles GOMAXPROCS: go test -tags stress -run TestPubSubStress.
func TestPubSubStress(t *testing.T) {
	tests.TestPubSubStressTest(t, features, newPubSub, nil)
}
