package watermill

import "github.com/sluicehq/sluice/taskid"

// Crash stops s as the death of its process would: its node goes away at
// once and its topics stay announced in the Directory.
func Crash(s *Subscriber) { _ = s.shutdown(false) }

// MapTopicsTo makes every Subscriber map each topic to task until the test
// ends, so that two topics collide.
func MapTopicsTo(t interface{ Cleanup(func()) }, task taskid.ID) {
	topicTask = func(string) taskid.ID { return task }
	t.Cleanup(func() { topicTask = TopicTask })
}

// HookOffer calls waits(n) each time a topic's handler starts waiting to
// offer a message to a snapshot of n subscriptions, and woke each time the
// wait ends, until the test ends.
func HookOffer(t interface{ Cleanup(func()) }, waits func(n int), woke func()) {
	testHookOfferWaits, testHookOfferWoke = waits, woke
	t.Cleanup(func() { testHookOfferWaits, testHookOfferWoke = nil, nil })
}

// HookRouted calls routed in Publish between finding the topic's route and
// taking its send lock, until the test ends.
func HookRouted(t interface{ Cleanup(func()) }, routed func()) {
	testHookRouted = routed
	t.Cleanup(func() { testHookRouted = nil })
}

// HookBacklogFull calls full each time a Publish, holding its topic's send
// lock, waits for room in the topic's backlog, until the test ends.
func HookBacklogFull(t interface{ Cleanup(func()) }, full func()) {
	testHookBacklogFull = full
	t.Cleanup(func() { testHookBacklogFull = nil })
}
