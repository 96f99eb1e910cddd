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
