#!/usr/bin/env bash
# The before/after runs of results/driver-clock: loadgen's fixed-rate cases
# ('loadgen bench --cases fixed', both topologies) with the driver's clock
# on Go timers alone (e92938a), with 2774de6's kernel sleep (nanosleep, then
# a yield), and with the variants measured and dropped (variants/*.go.txt,
# each put in place of 2774de6's bench/sleep_linux.go; "locked" is
# slack1us-locked.go.txt with setSlack false), in alternating rounds on one
# quiet machine. About 4 minutes per round and variant.
#
#   results/driver-clock/reproduce.sh [rounds] [variant...]
#   variants: timers nanosleep-yield nanosleep timerfd slack1us-locked locked
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
shift || true
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(timers nanosleep-yield nanosleep timerfd)
dir=$(mktemp -d)
out=results/driver-clock/raw
here=$PWD
cleanup() { for c in e92938a 2774de6; do git worktree remove --force "$dir/src-$c" 2>/dev/null || true; done; }
trap cleanup EXIT
git worktree add --detach "$dir/src-e92938a" e92938a > /dev/null
git worktree add --detach "$dir/src-2774de6" 2774de6 > /dev/null
for v in "${variants[@]}"; do
	case $v in
	timers) (cd "$dir/src-e92938a" && go build -o "$dir/loadgen-$v" ./cmd/loadgen) ;;
	nanosleep-yield) (cd "$dir/src-2774de6" && go build -o "$dir/loadgen-$v" ./cmd/loadgen) ;;
	*)
		src=$here/results/driver-clock/variants/${v}.go.txt
		[ "$v" = locked ] && src=$here/results/driver-clock/variants/slack1us-locked.go.txt
		cp "$dir/src-2774de6/bench/sleep_linux.go" "$dir/sleep_linux.go.orig"
		cp "$src" "$dir/src-2774de6/bench/sleep_linux.go"
		[ "$v" = locked ] && sed -i 's/setSlack        = true/setSlack        = false/' "$dir/src-2774de6/bench/sleep_linux.go"
		(cd "$dir/src-2774de6" && go build -o "$dir/loadgen-$v" ./cmd/loadgen)
		cp "$dir/sleep_linux.go.orig" "$dir/src-2774de6/bench/sleep_linux.go"
		;;
	esac
done
for i in $(seq "$rounds"); do
	for v in "${variants[@]}"; do
		"$dir/loadgen-$v" bench --topology both --cases fixed --duration 3s --out "$dir/$v-$i" --json 2> /dev/null |
			tail -1 > "$out/r-$v-$i.json"
	done
done
