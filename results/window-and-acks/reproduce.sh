#!/usr/bin/env bash
# The before/after runs of results/window-and-acks: loadgen built at three
# commits (66e65ed before, e3aa93c the encoded window, ee88a6d the spaced
# drain-time ack requests) and the transport benchmarks of the first two,
# run in alternating rounds on one quiet machine. About fifteen minutes.
#
#   results/window-and-acks/reproduce.sh [rounds]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
dir=$(mktemp -d)
out=results/window-and-acks/raw
commits=(66e65ed e3aa93c ee88a6d)
cleanup() { for c in "${commits[@]}"; do git worktree remove --force "$dir/src-$c" 2>/dev/null || true; done; }
trap cleanup EXIT
for c in "${commits[@]}"; do
	git worktree add --detach "$dir/src-$c" "$c" > /dev/null
	(cd "$dir/src-$c" && go build -o "$dir/loadgen-$c" ./cmd/loadgen && go test -c -o "$dir/tr-$c.test" ./transport)
done
bench() { # bench <prefix> <commit> <round> <topology> <cases>
	"$dir/loadgen-$2" bench --topology "$4" --cases "$5" --duration 3s --out "$dir/$1-$2-$3" --json 2> /dev/null |
		tail -1 > "$out/$1-$2-$3.json"
}
for i in $(seq "$rounds"); do
	for c in 66e65ed e3aa93c; do bench tp "$c" "$i" both throughput; done
	for c in e3aa93c 66e65ed; do bench t2 "$c" "$i" two throughput; done
	for c in e3aa93c ee88a6d; do bench dr "$c" "$i" both fixed,pingpong; done
done
{
	echo "# user s, system s, wall s of 40 M messages (BenchmarkTransport1Channel and ...Runs64, 20 M each)"
	for _ in $(seq $((2 * rounds))); do
		for c in 66e65ed e3aa93c; do
			/usr/bin/time -f "$c %U %S %e" "$dir/tr-$c.test" -test.run '^$' -test.benchtime 20000000x \
				-test.bench '^BenchmarkTransport1Channel(Runs64)?$' 2>&1 > /dev/null | tail -1
		done
	done
} > "$out/gotest-cpu.txt"
