package bench

import (
	"bufio"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/sluicehq/sluice/internal/crc32c"
)

func TestCPUModelReadsProcCPUInfo(t *testing.T) {
	tests := []struct {
		name, cpuinfo, want string
	}{
		{"an x86 machine names its model", "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz\n\nprocessor\t: 1\nmodel name\t: other\n", "Intel(R) Xeon(R) Gold 6248 CPU @ 2.50GHz"},
		{"an ARM board names its hardware", "processor\t: 0\nBogoMIPS\t: 108.00\n\nHardware\t: BCM2835\n", "BCM2835"},
		{"an empty file gives nothing", "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := cpuModel(bufio.NewScanner(strings.NewReader(tt.cpuinfo))); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestCommitOfMarksModifiedTreesDirty(t *testing.T) {
	tests := []struct {
		name     string
		settings []debug.BuildSetting
		want     string
	}{
		{"a clean build gives its revision", []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "false"}}, "abc123"},
		{"a modified tree is dirty", []debug.BuildSetting{{Key: "vcs.revision", Value: "abc123"}, {Key: "vcs.modified", Value: "true"}}, "abc123-dirty"},
		{"no revision gives nothing", []debug.BuildSetting{{Key: "vcs.modified", Value: "true"}}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := commitOf(tt.settings); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDetectMachineDescribesThisProcess(t *testing.T) {
	m := DetectMachine()
	if m.Cores != runtime.NumCPU() || m.Go != runtime.Version() || m.OS != runtime.GOOS || m.Arch != runtime.GOARCH {
		t.Errorf("got %+v", m)
	}
	if runtime.GOOS == "linux" && (m.Kernel == "" || m.CPU == "") {
		t.Errorf("on linux the kernel and CPU must be found: %+v", m)
	}
	if s := m.String(); !strings.Contains(s, m.Go) {
		t.Errorf("String() = %q lacks the Go version", s)
	}
	if m.CRC != crc32c.Method() || !strings.Contains(m.String(), "CRC-32C by "+m.CRC) {
		t.Errorf("the CRC-32C method %q (String %q), want %q", m.CRC, m.String(), crc32c.Method())
	}
}
