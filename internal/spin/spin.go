// Package spin lets a goroutine wait a moment for a lock another thread
// holds without touching the lock's memory meanwhile: Pause executes the
// CPU's spin-wait hint (PAUSE on amd64) n times, as the Go runtime's own
// mutexes do between looks at a held lock (procyield), which user code
// cannot call.
package spin
