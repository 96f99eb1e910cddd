#!/usr/bin/env bash
# Issue 16's before/after table: the transport, wire and store benchmarks
# built at three commits and run in alternating rounds on one machine, then
# compared with benchstat. before = 1eeeb12 (the last commit before the
# structural step), after16 = 27aa5b7 (its last transport commit), head =
# the commit checked out. About eight minutes; run on a quiet machine.
#
#   results/structure/reproduce.sh [rounds]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-8}
dir=$(mktemp -d)
trap 'git worktree remove --force "$dir/src-1eeeb12" 2>/dev/null || true; git worktree remove --force "$dir/src-27aa5b7" 2>/dev/null || true' EXIT
build() { # build <label> <source dir>
	(cd "$2" && go test -c -o "$dir/tr-$1.test" ./transport/ &&
		go test -c -o "$dir/wire-$1.test" ./wire/ &&
		go test -c -o "$dir/store-$1.test" ./engine/store/)
}
for c in 1eeeb12 27aa5b7; do
	git worktree add --detach "$dir/src-$c" "$c" > /dev/null
	build "$c" "$dir/src-$c"
done
build head .
labels=(1eeeb12 27aa5b7 head)
for _ in $(seq "$rounds"); do
	for c in "${labels[@]}"; do
		"$dir/tr-$c.test" -test.run '^$' -test.benchmem -test.benchtime 3000000x \
			-test.bench 'Transport1Channel$|Transport1ChannelRuns64$|Transport100Channels$|Transport10000ChannelsRuns16$|PlainTCPIdealBatching$' >> "$dir/$c.txt"
		"$dir/tr-$c.test" -test.run '^$' -test.benchmem -test.benchtime 20000x \
			-test.bench 'TransportPingPong$|PlainTCPPingPong$' >> "$dir/$c.txt"
		"$dir/wire-$c.test" -test.run '^$' -test.benchmem -test.bench . >> "$dir/$c.txt"
		"$dir/store-$c.test" -test.run '^$' -test.benchmem -test.bench . >> "$dir/$c.txt"
	done
done
out=results/structure
for c in "${labels[@]}"; do grep -E '^(Benchmark|goos|goarch|pkg|cpu)' "$dir/$c.txt" > "$out/$c.txt"; done
go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da \
	before="$out/1eeeb12.txt" after16="$out/27aa5b7.txt" head="$out/head.txt" | tee "$out/benchstat.txt"
