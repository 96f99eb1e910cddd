package transport

import (
	"encoding/binary"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sluicehq/sluice/taskid"
)

// Two honest nodes on the net backend open thousands of channels at once,
// a message each: the dialing side writes OPENs and DATA while the
// accepting side writes the ACKs. The loop of each writes synchronously;
// its reader once waited for the loop to take each read, so with both
// kernel buffers full, each loop blocked in its write and neither side
// read: the two deadlocked for good (with 8 KiB socket buffers, 3,000
// channels did every time, on net and on TLS). The reader now drains the
// socket while its loop writes.
func TestManyChannelsOpeningAtOnceDoNotDeadlockTheNetBackend(t *testing.T) {
	const channels = 3000
	for _, b := range backends(t)[1:] { // net and TLS
		t.Run(b.name, func(t *testing.T) {
			opts := append([]Option{WithSocketBuffers(8 << 10)}, b.opts...)
			rx := listeningNode(t, opts)
			var got [channels]atomic.Int32
			var wrong atomic.Int32
			rx.HandleAll(func(taskid.ID) Handler {
				return func(ch taskid.Channel, _ uint64, msgs []Message) {
					for _, m := range msgs {
						if len(m.Payload) != 4 || binary.LittleEndian.Uint32(m.Payload) != ch.Target.Index || ch.Target.Index >= channels {
							wrong.Add(1)
							continue
						}
						got[ch.Target.Index].Add(1)
					}
				}
			})
			tx := testNode(t, opts...)
			p, err := tx.Peer(rx.Addr())
			if err != nil {
				t.Fatal(err)
			}
			ctx := ctxT(t, time.Minute) // a hang guard: 1.5-1.9 s under -race on a busy machine
			for i := range uint32(channels) {
				s, err := p.OpenSender(ctx, taskid.ID{}, taskid.ID{Processor: 1, Index: i})
				if err != nil {
					t.Fatal(err)
				}
				if err := s.TrySend(int64(i), binary.LittleEndian.AppendUint32(nil, i)); err != nil {
					t.Fatalf("channel %d: %v", i, err)
				}
			}
			delivered := func() (n int) {
				for i := range got {
					if got[i].Load() > 0 {
						n++
					}
				}
				return n
			}
			for delivered() < channels {
				select {
				case <-ctx.Done():
					_, opened := unstoppedInboxes(rx)
					t.Fatalf("after a minute, %d of %d channels opened and %d delivered their message: the nodes deadlock", opened, channels, delivered())
				case <-time.After(5 * time.Millisecond):
				}
			}
			if _, opened := unstoppedInboxes(rx); opened != channels {
				t.Errorf("%d channels opened, want %d", opened, channels)
			}
			for i := range got {
				if n := got[i].Load(); n != 1 {
					t.Errorf("channel %d delivered its message %d times", i, n)
				}
			}
			if n := wrong.Load(); n > 0 {
				t.Errorf("%d messages delivered on a channel not theirs", n)
			}
		})
	}
}
