#!/usr/bin/env bash
# Instructions a message of the transport's one-channel benchmarks, counted by
# callgrind (deterministic, unlike time on a shared VM). Needs valgrind
# (Debian package "valgrind"). Usage: callgrind.sh [out-dir]; about a minute.
# Go's asynchronous preemption signals upset callgrind, hence asyncpreemptoff.
set -euo pipefail
cd "$(dirname "$0")/../../.."
out=${1:-/tmp/callgrind}
mkdir -p "$out"
go test -c -o "$out/transport.test" ./transport
for b in Transport1ChannelRuns64 Transport1Channel; do
	GODEBUG=asyncpreemptoff=1 GOMAXPROCS=1 valgrind --tool=callgrind --callgrind-out-file="$out/$b.out" \
		"$out/transport.test" -test.run '^$' -test.bench "^Benchmark$b\$" -test.benchtime 2000000x 2>&1 |
		grep -E "^Benchmark|I +refs" | sed "s/^/$b: /"
	callgrind_annotate --inclusive=no "$out/$b.out" 2>/dev/null | grep -E '^ *[0-9,]+ \(' | sed -n 2,16p
done
