package bench

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"time"
)

// ErrNoProcessCPU is returned by ProcessCPU where the system does not say
// how much CPU a process has used (anything but Linux).
var ErrNoProcessCPU = errors.New("bench: process CPU time is read from /proc, which this system lacks")

// userHZ is the unit of the CPU times in /proc/<pid>/stat: clock ticks of
// USER_HZ, which Linux fixes at 100 a second for every architecture.
const userHZ = 100

// parseStatCPU returns the user plus system CPU time in the contents of a
// /proc/<pid>/stat file: fields 14 (utime) and 15 (stime), counted after
// the command name, which is in parentheses and may itself hold spaces
// and parentheses.
func parseStatCPU(stat []byte) (time.Duration, error) {
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, fmt.Errorf("bench: /proc stat without a command name: %.40q", stat)
	}
	// After the name: state (field 3), ppid, ..., utime (14), stime (15).
	f := bytes.Fields(stat[end+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("bench: /proc stat has %d fields after the command name, want at least 13", len(f))
	}
	var ticks uint64
	for _, s := range f[11:13] {
		n, err := strconv.ParseUint(string(s), 10, 63)
		if err != nil {
			return 0, fmt.Errorf("bench: /proc stat CPU time %q: %w", s, err)
		}
		ticks += n
	}
	if ticks > uint64(1<<63-1)/uint64(time.Second/userHZ) {
		return 0, fmt.Errorf("bench: /proc stat CPU time of %d ticks is out of range", ticks)
	}
	return time.Duration(ticks) * (time.Second / userHZ), nil
}
