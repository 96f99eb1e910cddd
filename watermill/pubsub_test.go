package watermill_test

import (
	"testing"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/tests"

	"github.com/sluicehq/sluice/watermill"
)

// features are what this Pub/Sub supports, as README "What it guarantees"
// explains each.
var features = tests.Features{
	ConsumerGroups:      false,
	ExactlyOnceDelivery: true,
	GuaranteedOrder:     true,
	Persistent:          false,
	// Every Subscriber of a topic receives every message (fan-out), so
	// subscribers made by separate constructor calls, merged into one
	// channel by the suite, would each get the whole stream.
	RequireSingleInstance:            true,
	NewSubscriberReceivesOldMessages: false,
}

// suiteOptions hold the suite's largest burst published before anyone
// subscribes (10,000 messages in TestPublisherClose) in the backlog, and
// give up on unacknowledged messages at close sooner than the suite's 15 s
// waits.
var suiteOptions = []watermill.Option{
	watermill.WithBacklog(20_000, 16<<20),
	watermill.WithCloseTimeout(2 * time.Second),
}

// newPubSub is the suite's constructor: a Publisher and a Subscriber, each
// with a node of its own, meeting in one Directory shared by the whole test
// binary, as the services of one deployment would.
func newPubSub(t *testing.T) (message.Publisher, message.Subscriber) {
	t.Helper()
	pub, err := watermill.NewPublisher(directory, suiteOptions...)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := watermill.NewSubscriber(directory, suiteOptions...)
	if err != nil {
		t.Fatal(err)
	}
	return pub, sub
}

var directory = watermill.NewMemDirectory()

func TestPubSub(t *testing.T) {
	tests.TestPubSub(t, features, newPubSub, nil)
}
