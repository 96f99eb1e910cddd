package watermill

import (
	"hash/fnv"
	"slices"
	"sync"

	"github.com/sluicehq/sluice/taskid"
)

// Endpoint is where one Subscriber receives one topic: its node's listening
// address and the target task the topic maps to there ([TopicTask]).
type Endpoint struct {
	Addr string
	Task taskid.ID
}

// Directory is the rendezvous of publishers and subscribers: a Subscriber
// announces each topic it subscribes to with its Endpoint, and withdraws it
// when it closes; a Publisher watches the topics it publishes to and sends
// each message to every endpoint announced for its topic.
//
// Implementations must be safe for concurrent use, and must call a
// watcher's function with the endpoints of its topic once when Watch is
// called and then after every change, one call at a time, in the order of
// the changes, never after stop has returned. [MemDirectory] serves the
// publishers and subscribers of one process; a deployment across processes
// implements Directory over whatever registry it already has (a
// configuration file, DNS, etcd).
type Directory interface {
	Announce(topic string, ep Endpoint) error
	Withdraw(topic string, ep Endpoint) error
	Watch(topic string, fn func([]Endpoint)) (stop func(), err error)
}

// TopicTask is the target task a topic maps to on a subscriber's node: the
// 64-bit FNV-1a hash of its name, split into processor (high half) and index.
// Two topics of one Subscriber that hash alike are refused by Subscribe
// ([ErrTopicCollision]); on different nodes they do not meet.
func TopicTask(topic string) taskid.ID {
	h := fnv.New64a()
	h.Write([]byte(topic))
	v := h.Sum64()
	return taskid.ID{Processor: uint32(v >> 32), Index: uint32(v)}
}

// topicTask is what Subscribe maps a topic with; a test forces a collision
// through it.
var topicTask = TopicTask

// MemDirectory is a Directory in memory, for the publishers and subscribers
// of one process (and tests). The zero value is not usable; call
// NewMemDirectory. Safe for concurrent use.
type MemDirectory struct {
	mu struct {
		sync.Mutex
		topics map[string]*memTopic
	}
}

type memTopic struct {
	eps      []Endpoint
	watchers map[int]*memWatcher
	next     int
}

// A memWatcher's calls are serialized by its own lock, taken before the
// directory's is released, so that they come in the order of the changes.
type memWatcher struct {
	mu      sync.Mutex
	fn      func([]Endpoint)
	stopped bool
}

// NewMemDirectory returns an empty directory.
func NewMemDirectory() *MemDirectory {
	d := &MemDirectory{}
	d.mu.topics = make(map[string]*memTopic)
	return d
}

func (d *MemDirectory) topicLocked(topic string) *memTopic {
	t := d.mu.topics[topic]
	if t == nil {
		t = &memTopic{watchers: make(map[int]*memWatcher)}
		d.mu.topics[topic] = t
	}
	return t
}

// Announce adds ep to topic's endpoints; announcing it again changes nothing.
func (d *MemDirectory) Announce(topic string, ep Endpoint) error {
	d.mu.Lock()
	t := d.topicLocked(topic)
	if slices.Contains(t.eps, ep) {
		d.mu.Unlock()
		return nil
	}
	t.eps = append(slices.Clip(t.eps), ep)
	d.notifyLocked(t)
	return nil
}

// Withdraw removes ep from topic's endpoints.
func (d *MemDirectory) Withdraw(topic string, ep Endpoint) error {
	d.mu.Lock()
	t := d.topicLocked(topic)
	i := slices.Index(t.eps, ep)
	if i < 0 {
		d.mu.Unlock()
		return nil
	}
	t.eps = slices.Delete(slices.Clone(t.eps), i, i+1)
	d.notifyLocked(t)
	return nil
}

// notifyLocked calls t's watchers with its endpoints and unlocks d.mu. Each
// watcher's lock is taken in turn before d.mu is released, so a later change
// cannot overtake this one.
func (d *MemDirectory) notifyLocked(t *memTopic) {
	eps := t.eps // never modified in place: each change makes a new slice
	ws := make([]*memWatcher, 0, len(t.watchers))
	for _, w := range t.watchers {
		ws = append(ws, w)
	}
	for _, w := range ws {
		w.mu.Lock()
	}
	d.mu.Unlock()
	for _, w := range ws {
		if !w.stopped {
			w.fn(slices.Clone(eps))
		}
		w.mu.Unlock()
	}
}

// Watch calls fn with topic's endpoints now and after every change until
// stop is called. fn must not call back into the directory.
func (d *MemDirectory) Watch(topic string, fn func([]Endpoint)) (stop func(), err error) {
	w := &memWatcher{fn: fn}
	d.mu.Lock()
	t := d.topicLocked(topic)
	id := t.next
	t.next++
	t.watchers[id] = w
	w.mu.Lock()
	eps := t.eps
	d.mu.Unlock()
	fn(slices.Clone(eps))
	w.mu.Unlock()
	return func() {
		d.mu.Lock()
		delete(t.watchers, id)
		d.mu.Unlock()
		w.mu.Lock()
		w.stopped = true
		w.mu.Unlock()
	}, nil
}
