package watermill_test

import (
	"context"
	"fmt"

	"github.com/ThreeDotsLabs/watermill/message"

	"github.com/sluicehq/sluice/watermill"
)

// A subscriber announces its topic in a directory; a publisher finds it
// there and sends over a Sluice channel between the two nodes.
func Example() {
	dir := watermill.NewMemDirectory()

	sub, err := watermill.NewSubscriber(dir) // listens on 127.0.0.1, a free port
	if err != nil {
		panic(err)
	}
	defer sub.Close()
	orders, err := sub.Subscribe(context.Background(), "orders")
	if err != nil {
		panic(err)
	}

	pub, err := watermill.NewPublisher(dir)
	if err != nil {
		panic(err)
	}
	defer pub.Close() // runs first: waits until the subscriber acked everything

	msg := message.NewMessage("6ba7b810-9dad-11d1-80b4-00c04fd430c8", []byte("2 espressos"))
	msg.Metadata.Set("customer", "ada")
	if err := pub.Publish("orders", msg); err != nil {
		panic(err)
	}

	got := <-orders
	fmt.Println(got.UUID, got.Metadata.Get("customer"), string(got.Payload))
	got.Ack() // the next message of the topic comes once this one is acked
	// Output: 6ba7b810-9dad-11d1-80b4-00c04fd430c8 ada 2 espressos
}
