package main

import (
	"context"
	"fmt"
	"os"
)

// Interrupts (SIGINT, SIGTERM) come in three steps. The first cancels the
// command's context: a run stops measuring and reports what it has. Some
// of that reporting waits (the transport scenario waits for its receiver
// to acknowledge what was sent, up to drainTimeout), and such waits are
// bounded by abortOf(ctx) rather than by ctx, which has ended; the second
// interrupt cancels abortOf(ctx), so that they end at once and the report
// says what they did not confirm. The third is Go's default: the process
// dies.

type abortKey struct{}

// withAbort returns ctx with abort as its abortOf.
func withAbort(ctx, abort context.Context) context.Context {
	return context.WithValue(ctx, abortKey{}, abort)
}

// abortOf returns the context that ends when the user insists (a second
// interrupt): what a command does after ctx ended to finish its report is
// bounded by it. Without one (a test's context, say) it never ends.
func abortOf(ctx context.Context) context.Context {
	if a, ok := ctx.Value(abortKey{}).(context.Context); ok {
		return a
	}
	return context.Background()
}

// notifyInterrupts returns a context that the first signal on sigs
// cancels and whose abortOf the second cancels; after the second it calls
// release (signal.Stop on sigs), so that a third gets the default
// behaviour. stop ends it all, calling release.
func notifyInterrupts(parent context.Context, sigs <-chan os.Signal, release func()) (ctx context.Context, stop func()) {
	abort, cancelAbort := context.WithCancel(parent)
	ctx, cancel := context.WithCancelCause(withAbort(parent, abort))
	done := make(chan struct{})
	go func() {
		defer close(done)
		for n := range 2 {
			var s os.Signal
			select {
			case s = <-sigs:
			case <-abort.Done():
				return
			}
			if n == 0 {
				cancel(fmt.Errorf("%v signal received", s)) // as signal.NotifyContext's cause
			} else {
				cancelAbort()
				release()
			}
		}
	}()
	return ctx, func() {
		cancelAbort()
		cancel(nil)
		<-done
		release()
	}
}
