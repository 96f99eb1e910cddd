package batch_test

import (
	"fmt"
	"time"

	"github.com/sluicehq/sluice/batch"
)

// A connection's event loop asks the policy after every event: data arriving,
// a timer firing, a write completing.
func ExamplePolicy() {
	p := batch.New(batch.DefaultConfig())
	us := time.Microsecond.Nanoseconds()
	ready := 0
	step := func(now int64, event string) {
		d := p.Decide(now, ready)
		switch {
		case d.Flush:
			fmt.Printf("%3dµs %-12s flush %d bytes (%v)\n", now/us, event, ready, d.Cause)
			p.Flushed(now, ready, d.Cause)
			ready = 0
			p.Decide(now, ready)
		case d.WakeAt != 0:
			fmt.Printf("%3dµs %-12s wait until %dµs\n", now/us, event, d.WakeAt/us)
		default:
			fmt.Printf("%3dµs %-12s nothing to do\n", now/us, event)
		}
	}
	ready += 100
	step(0, "send") // nothing in flight: out at once
	ready += 100
	step(10*us, "send") // a write in flight: linger
	ready += 100
	step(20*us, "send")
	p.WriteDone(30 * us)
	step(30*us, "write done") // the write completed: what waits goes out
	ready += 100
	step(40*us, "send")  // the linger has adapted to the 30 µs the write took
	step(70*us, "timer") // this write takes longer: the linger ends first
	// Output:
	//   0µs send         flush 100 bytes (idle)
	//  10µs send         wait until 60µs
	//  20µs send         wait until 60µs
	//  30µs write done   flush 200 bytes (write-done)
	//  40µs send         wait until 70µs
	//  70µs timer        flush 100 bytes (linger)
}

// A sender compresses a batch when it pays; the receiver decompresses it
// with a limit.
func ExampleCompressor() {
	c := batch.NewCompressor(1024)
	var payload []byte
	for i := range 200 {
		payload = fmt.Appendf(payload, `{"seq":%d,"event":"click","page":"/home"}`, i)
	}
	out, compressed := c.Compress(nil, payload)
	fmt.Println("compressed:", compressed, len(payload), "->", len(out) < len(payload)/2)

	back, err := batch.Decompress(nil, out, 64<<10)
	fmt.Println("round trip:", err == nil && string(back) == string(payload))

	_, err = batch.Decompress(nil, out, 1024)
	fmt.Println(err)
	// Output:
	// compressed: true 8290 -> true
	// round trip: true
	// batch: decompressed size 8290 exceeds limit 1024
}
