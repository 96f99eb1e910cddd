// Package watermill is a Watermill Pub/Sub (message.Publisher and
// message.Subscriber, github.com/ThreeDotsLabs/watermill) whose messages
// travel between Sluice transport nodes over TCP.
//
// A Subscriber runs a listening node; its first Subscribe to a topic
// registers the handler of the topic's target task (TopicTask) on it and
// announces the topic's Endpoint in a Directory. A Publisher runs a dialing
// node, watches the Directory for the topics it publishes to, and sends
// each message on one Sluice channel per announced subscription, keeping a
// bounded backlog while a topic has none. Each Watermill message is one
// Sluice message: its UUID, metadata and payload in a compact encoding
// (AppendMessage, DecodeMessage).
//
// The subscriber's handler hands out the messages of a run one at a time and
// returns the run, so that the node acknowledges it and the publisher's
// window advances, only when every message of it is acked; a Nack offers the
// message again. A subscriber that does not ack therefore stops its
// publishers on Sluice's credit: Publish blocks until the subscriber catches
// up, the message's context ends, or the Publisher closes.
//
// README.md states what it guarantees, as Watermill's universal test suite
// (pubsub/tests) checks it, and what a restart of a subscriber's node
// delivers.
package watermill
