package bench

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"strings"
	"time"

	"github.com/sluicehq/sluice/internal/crc32c"
)

// Machine describes where a benchmark ran. Every published figure carries
// one, because a throughput number means nothing without its CPU, core count,
// kernel and Go version.
type Machine struct {
	CPU    string `json:"cpu"`
	Cores  int    `json:"cores"`
	Kernel string `json:"kernel"`
	Go     string `json:"go"`
	OS     string `json:"os"`
	Arch   string `json:"arch"`
	Commit string `json:"commit"`
	// CRC says how this machine computes the CRC-32C of every frame
	// (internal/crc32c.Method): a VM that hides AVX-512 from the same CPU
	// model computes it at two thirds of the speed, which shows in the
	// transport's CPU a message.
	CRC string `json:"crc32c,omitempty"`
}

// DetectMachine describes the machine the process runs on: the CPU model
// from /proc/cpuinfo, the kernel release from /proc/sys/kernel/osrelease,
// runtime.NumCPU cores, runtime.Version, and the source commit from the
// binary's build info (vcs.revision, with "-dirty" when vcs.modified),
// falling back to `git rev-parse --short HEAD` in the working directory.
// Fields it cannot find are left empty; it never fails. It is safe for
// concurrent use.
func DetectMachine() Machine {
	m := Machine{
		Cores: runtime.NumCPU(),
		Go:    runtime.Version(),
		OS:    runtime.GOOS,
		Arch:  runtime.GOARCH,
		CRC:   crc32c.Method(),
	}
	if f, err := os.Open("/proc/cpuinfo"); err == nil {
		m.CPU = cpuModel(bufio.NewScanner(f))
		f.Close()
	}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		m.Commit = commitOf(bi.Settings)
	}
	if m.Commit == "" {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "git", "rev-parse", "--short", "HEAD").Output(); err == nil {
			m.Commit = strings.TrimSpace(string(out))
		}
	}
	return m
}

// cpuModel returns the first CPU model name in /proc/cpuinfo's format: the
// "model name" line on x86, else "Hardware" or "Processor" lines that ARM
// kernels print.
func cpuModel(sc *bufio.Scanner) string {
	var fallback string
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		switch key {
		case "model name":
			if val != "" {
				return val
			}
		case "Hardware", "Processor", "cpu model", "uarch":
			if fallback == "" {
				fallback = val
			}
		}
	}
	return fallback
}

// commitOf returns the vcs.revision build setting, with "-dirty" appended
// when vcs.modified is true, or "" when the binary has no revision.
func commitOf(settings []debug.BuildSetting) string {
	var rev string
	var dirty bool
	for _, s := range settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return ""
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// String formats the machine on one line, for Markdown and progress output.
func (m Machine) String() string {
	var b strings.Builder
	b.WriteString(orUnknown(m.CPU))
	b.WriteString(", ")
	b.WriteString(itoa(int64(m.Cores)))
	b.WriteString(" cores, ")
	b.WriteString(m.OS + "/" + m.Arch)
	b.WriteString(" kernel ")
	b.WriteString(orUnknown(m.Kernel))
	b.WriteString(", ")
	b.WriteString(m.Go)
	if m.Commit != "" {
		b.WriteString(", commit ")
		b.WriteString(m.Commit)
	}
	if m.CRC != "" {
		b.WriteString(", CRC-32C by ")
		b.WriteString(m.CRC)
	}
	return b.String()
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
