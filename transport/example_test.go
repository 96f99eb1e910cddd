package transport_test

import (
	"context"
	"fmt"
	"time"

	"github.com/sluicehq/sluice/taskid"
	"github.com/sluicehq/sluice/transport"
)

// Two nodes in one process, as README.md's "Using the transport" shows
// them: a receiving node whose target task's handler takes runs of
// messages, and a sending node that opens a channel to it.
func ExampleNode() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	source, target := taskid.ID{Processor: 0, Index: 0}, taskid.ID{Processor: 1, Index: 0}

	rx, err := transport.NewNode(transport.WithListen("127.0.0.1:0"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer rx.Close(ctx)
	got := make(chan string, 3)
	// The handler runs on the task's own goroutine and may block; the
	// payloads are valid until it returns.
	if err := rx.Handle(target, func(ch taskid.Channel, first uint64, msgs []transport.Message) {
		for i, m := range msgs {
			got <- fmt.Sprintf("%v -> %v: message %d, ts %d, %q", ch.Source, ch.Target, first+uint64(i), m.Ts, m.Payload)
		}
	}); err != nil {
		fmt.Println(err)
		return
	}

	tx, err := transport.NewNode(transport.WithWindow(transport.DefaultWindowMessages, transport.DefaultWindowBytes))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tx.Close(ctx)
	peer, err := tx.Peer(rx.Addr())
	if err != nil {
		fmt.Println(err)
		return
	}
	s, err := peer.OpenSender(ctx, source, target)
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := s.Send(ctx, 100, []byte("one")); err != nil { // blocks while the channel has no credit
		fmt.Println(err)
		return
	}
	if _, err := s.SendRun(ctx, []transport.Message{{Ts: 101, Payload: []byte("two")}, {Ts: 102, Payload: []byte("three")}}); err != nil {
		fmt.Println(err)
		return
	}
	if err := s.Flush(ctx); err != nil { // until the target task consumed everything sent
		fmt.Println(err)
		return
	}
	for range 3 {
		fmt.Println(<-got)
	}
	// Output:
	// 0.0 -> 1.0: message 0, ts 100, "one"
	// 0.0 -> 1.0: message 1, ts 101, "two"
	// 0.0 -> 1.0: message 2, ts 102, "three"
}
