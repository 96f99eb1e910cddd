package transport

import (
	"testing"
	"time"

	"github.com/sluicehq/sluice/batch"
	"github.com/sluicehq/sluice/lossdetect"
	"github.com/sluicehq/sluice/window"
)

// The flat options' documented defaults are those of the state machines
// they configure, and each option sets the field it names.
func TestFlatOptionsSetTheConfigsBehindThem(t *testing.T) {
	o := defaultOptions()
	if w := window.DefaultConfig(); w.MaxMessages != DefaultWindowMessages || w.MaxBytes != DefaultWindowBytes {
		t.Errorf("window defaults %d messages, %d bytes; the transport documents %d and %d",
			w.MaxMessages, w.MaxBytes, DefaultWindowMessages, DefaultWindowBytes)
	}
	if o.window != window.DefaultConfig() || o.loss != lossdetect.DefaultConfig() || o.batch != batch.DefaultConfig() {
		t.Errorf("default options %+v %+v %+v are not the packages' defaults", o.window, o.loss, o.batch)
	}
	ms := time.Millisecond
	WithOptions(WithWindow(64, 1<<16), WithAckTimeouts(30*ms, 3*ms, 2*time.Second),
		WithMaxBatch(32<<10), WithLinger(ms, ms, ms))(&o)
	if o.window.MaxMessages != 64 || o.window.MaxBytes != 1<<16 {
		t.Errorf("WithWindow(64, 64 KiB) gave %+v", o.window)
	}
	if o.loss != (lossdetect.Config{InitialAckTimeout: 30 * ms, MinAckTimeout: 3 * ms, MaxAckTimeout: 2 * time.Second}) {
		t.Errorf("WithAckTimeouts(30ms, 3ms, 2s) gave %+v", o.loss)
	}
	if o.batch.MaxBatchBytes != 32<<10 || o.batch.Linger != ms || o.batch.MinLinger != ms || o.batch.MaxLinger != ms {
		t.Errorf("WithMaxBatch(32 KiB), WithLinger(1ms, 1ms, 1ms) gave %+v", o.batch)
	}
	if err := o.validate(); err != nil {
		t.Errorf("valid options refused: %v", err)
	}
	WithAckTimeouts(ms, 2*ms, time.Second)(&o)
	if err := o.validate(); err == nil {
		t.Error("an initial ack timeout below the minimum was accepted")
	}
}
