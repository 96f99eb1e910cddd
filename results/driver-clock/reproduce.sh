#!/usr/bin/env bash
# The before/after runs of results/driver-clock: loadgen's fixed-rate cases
# ('loadgen bench --cases fixed', both topologies) with the driver's clock on
# Go timers alone (e92938a), with this checkout's kernel sleep (nanosleep),
# and with the variants measured and dropped (variants/<name>.go.txt, each
# put in place of this checkout's bench/sleep_linux.go; "locked" is
# slack1us-locked.go.txt with setSlack false), in alternating rounds on one
# quiet machine. About four minutes per round and variant.
#
#   results/driver-clock/reproduce.sh [rounds] [variant...]
#   variants: timers nanosleep nanosleep-yield timerfd slack1us-locked locked
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
shift || true
variants=("$@")
[ ${#variants[@]} -gt 0 ] || variants=(timers nanosleep nanosleep-yield timerfd)
dir=$(mktemp -d)
out=results/driver-clock/raw
here=$PWD
cleanup() { for w in timers variant; do git worktree remove --force "$dir/src-$w" 2>/dev/null || true; done; }
trap cleanup EXIT
git worktree add --detach "$dir/src-timers" e92938a > /dev/null
git worktree add --detach "$dir/src-variant" HEAD > /dev/null
for v in "${variants[@]}"; do
	case $v in
	timers) (cd "$dir/src-timers" && go build -o "$dir/loadgen-$v" ./cmd/loadgen) ;;
	nanosleep) go build -o "$dir/loadgen-$v" ./cmd/loadgen ;;
	*)
		name=$v
		[ "$v" = locked ] && name=slack1us-locked
		sleep_go=$dir/src-variant/bench/sleep_linux.go
		cp "$sleep_go" "$dir/sleep_linux.go.orig"
		cp "$here/results/driver-clock/variants/$name.go.txt" "$sleep_go"
		[ "$v" = locked ] && sed -i 's/setSlack        = true/setSlack        = false/' "$sleep_go"
		(cd "$dir/src-variant" && go build -o "$dir/loadgen-$v" ./cmd/loadgen)
		cp "$dir/sleep_linux.go.orig" "$sleep_go"
		;;
	esac
done
for i in $(seq "$rounds"); do
	for v in "${variants[@]}"; do
		"$dir/loadgen-$v" bench --topology both --cases fixed --duration 3s --out "$dir/$v-$i" --json 2> /dev/null |
			tail -1 > "$out/r-$v-$i.json"
	done
done
