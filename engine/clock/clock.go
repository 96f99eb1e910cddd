// Package clock is the global minimum clock service of the task engine.
//
// Every task reports its own minimum clock: the least timestamp among its
// pending input, its unacknowledged output and its state. The global minimum
// clock is the least of those over all tasks: no message older than it is
// still in flight anywhere, so a checkpoint at the global minimum is
// consistent and a source may drop what is older than the last completed
// checkpoint.
//
// The service keeps the minimum incrementally in an indexed binary min-heap
// keyed by task: Report, Register and Unregister cost O(log n) and Min is
// O(1), where a naive service would scan all n tasks on every report.
//
// A task's clock may go down (a lost message is re-sent, so its
// unacknowledged output holds its timestamp again), but the global minimum
// never does: [Service.Min] returns the largest minimum ever observed. That
// is sound because a task's clock can only fall back to a timestamp it was
// still holding, which the minimum already accounted for.
//
// Idle tasks: a task with nothing pending, nothing unacknowledged and no
// timestamped state reports [Idle] (math.MaxInt64) so that it never holds the
// clock back. A source must instead report the timestamp of the next message
// it may still emit, and only report Idle once it has finished for good:
// when every task reports Idle the global minimum becomes Idle and, being
// monotone, stays there.
package clock

import (
	"math"
	"sync"
)

// Idle is the clock of a task that holds nothing back.
const Idle int64 = math.MaxInt64

// Start is the global minimum before any task has reported.
const Start int64 = math.MinInt64

// Service tracks the clocks of a set of tasks, identified by keys of type
// K, and their monotone global minimum. All methods are safe for concurrent
// use.
type Service[K comparable] struct {
	mu struct {
		sync.Mutex
		// heap is a binary min-heap on clock. Clocks sit in the heap array
		// itself so that sifting touches contiguous memory; each item
		// names its task's slot, and the slot records the item's position.
		heap    []item
		slots   []slot[K]
		free    []int32 // unused slot numbers
		byKey   map[K]int32
		min     int64 // the published global minimum, never decreasing
		watches map[*watch]struct{}
	}
}

type item struct {
	clock int64
	slot  int32
}

type slot[K comparable] struct {
	key K
	pos int32 // index of the task's item in heap
}

type watch struct{ ch chan int64 }

// New returns a service with no tasks and a global minimum of [Start].
func New[K comparable]() *Service[K] {
	s := &Service[K]{}
	s.mu.byKey = make(map[K]int32)
	s.mu.min = Start
	s.mu.watches = make(map[*watch]struct{})
	return s
}

// Register adds task with the given clock, or sets the clock of a task
// already registered. Registering below the current global minimum does not
// lower it: recovery registers tasks at the restored checkpoint's timestamp
// or later.
func (s *Service[K]) Register(task K, clock int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if id, ok := s.mu.byKey[task]; ok {
		s.setLocked(id, clock)
		return
	}
	var id int32
	if n := len(s.mu.free); n > 0 {
		id = s.mu.free[n-1]
		s.mu.free = s.mu.free[:n-1]
	} else {
		id = int32(len(s.mu.slots))
		s.mu.slots = append(s.mu.slots, slot[K]{})
	}
	pos := int32(len(s.mu.heap))
	s.mu.slots[id] = slot[K]{key: task, pos: pos}
	s.mu.byKey[task] = id
	s.mu.heap = append(s.mu.heap, item{clock: clock, slot: id})
	s.up(int(pos))
	s.publishLocked()
}

// Report sets the minimum clock of a registered task; it may be lower than
// the task's previous report. It returns false, and does nothing, if task is
// not registered (for example a late report after Unregister).
func (s *Service[K]) Report(task K, clock int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.mu.byKey[task]
	if !ok {
		return false
	}
	s.setLocked(id, clock)
	return true
}

// Unregister removes task; the global minimum may then rise. Removing an
// unknown task is a no-op. With no tasks left the minimum stays where it
// was.
func (s *Service[K]) Unregister(task K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.mu.byKey[task]
	if !ok {
		return
	}
	delete(s.mu.byKey, task)
	i := int(s.mu.slots[id].pos)
	s.mu.slots[id] = slot[K]{}
	s.mu.free = append(s.mu.free, id)
	h := s.mu.heap
	last := len(h) - 1
	if i != last {
		h[i] = h[last]
		s.mu.slots[h[i].slot].pos = int32(i)
	}
	s.mu.heap = h[:last]
	if i != last {
		s.fix(i)
	}
	s.publishLocked()
}

// Min returns the global minimum clock: the largest value the minimum of
// all registered tasks' clocks has had, or [Start] if no task ever
// registered. It never decreases.
func (s *Service[K]) Min() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.mu.min
}

// Clock returns the last clock reported by task and whether it is
// registered.
func (s *Service[K]) Clock(task K) (int64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.mu.byKey[task]
	if !ok {
		return 0, false
	}
	return s.mu.heap[s.mu.slots[id].pos].clock, true
}

// Len returns the number of registered tasks.
func (s *Service[K]) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.mu.heap)
}

// Watch returns a channel on which the global minimum is delivered each time
// it increases, starting with its current value. The channel holds only the
// latest value: a slow reader skips intermediate minima but always sees the
// newest, and the values it sees strictly increase. Sending never blocks the
// reporting task. cancel stops delivery and closes the channel; it is safe
// to call more than once.
func (s *Service[K]) Watch() (updates <-chan int64, cancel func()) {
	w := &watch{ch: make(chan int64, 1)}
	s.mu.Lock()
	s.mu.watches[w] = struct{}{}
	w.ch <- s.mu.min
	s.mu.Unlock()
	var once sync.Once
	return w.ch, func() {
		once.Do(func() {
			s.mu.Lock()
			delete(s.mu.watches, w)
			close(w.ch)
			s.mu.Unlock()
		})
	}
}

func (s *Service[K]) setLocked(id int32, clock int64) {
	i := int(s.mu.slots[id].pos)
	if s.mu.heap[i].clock == clock {
		return
	}
	s.mu.heap[i].clock = clock
	s.fix(i)
	s.publishLocked()
}

// publishLocked raises the published minimum to the heap's top if that is
// higher, and tells the watchers.
func (s *Service[K]) publishLocked() {
	if len(s.mu.heap) == 0 {
		return
	}
	cur := s.mu.heap[0].clock
	if cur <= s.mu.min {
		return
	}
	s.mu.min = cur
	for w := range s.mu.watches {
		// Only this goroutine sends, under mu, so after draining the
		// one-slot buffer the send cannot block.
		select {
		case <-w.ch:
		default:
		}
		w.ch <- cur
	}
}

// fix restores the heap order after the clock at i changed.
func (s *Service[K]) fix(i int) {
	if !s.down(i) {
		s.up(i)
	}
}

func (s *Service[K]) up(i int) {
	h, slots := s.mu.heap, s.mu.slots
	it := h[i]
	for i > 0 {
		p := (i - 1) / 2
		if h[p].clock <= it.clock {
			break
		}
		h[i] = h[p]
		slots[h[i].slot].pos = int32(i)
		i = p
	}
	h[i] = it
	slots[it.slot].pos = int32(i)
}

// down sifts the item at i0 toward the leaves and reports whether it moved.
func (s *Service[K]) down(i0 int) bool {
	h, slots := s.mu.heap, s.mu.slots
	n := len(h)
	i := i0
	it := h[i]
	for {
		c := 2*i + 1
		if c >= n {
			break
		}
		if r := c + 1; r < n && h[r].clock < h[c].clock {
			c = r
		}
		if h[c].clock >= it.clock {
			break
		}
		h[i] = h[c]
		slots[h[i].slot].pos = int32(i)
		i = c
	}
	h[i] = it
	slots[it.slot].pos = int32(i)
	return i > i0
}
