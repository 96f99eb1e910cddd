#!/usr/bin/env bash
# Re-runs results/cpu-budget: three full loadgen bench runs and their summary
# (CPU per message and cores beside every throughput case) and the go test
# CPU-per-message figures.
# About eleven minutes. Writes under /tmp/cpu-budget.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=/tmp/cpu-budget
mkdir -p $out
go build -o $out/loadgen ./cmd/loadgen
go test -c -o $out/transport.test ./transport
$out/loadgen bench --repeat 3 --out $out/bench > $out/bench.txt
# CPU per message of one process: user and system time over 30 M messages.
for i in 1 2 3; do
	for b in 'PlainTCPIdealBatching$' 'Transport1ChannelRuns64$' 'Transport1Channel$'; do
		TIMEFORMAT="$b: user %U s, system %S s, wall %R s (30 M messages)"
		time $out/transport.test -test.run '^$' -test.bench "$b" -test.benchtime 30000000x | grep Benchmark
	done
done 2>&1 | tee $out/gotest-cpu.txt
# One P a process against two (about ten minutes; needs /usr/bin/time, Debian package "time").
if [ -x /usr/bin/time ]; then
	bash results/cpu-budget/gomaxprocs.sh | tee $out/gomaxprocs.txt
else
	echo "skipped gomaxprocs.sh: /usr/bin/time is missing (apt-get install time)" >&2
fi
