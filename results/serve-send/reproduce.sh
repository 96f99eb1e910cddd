#!/usr/bin/env bash
# The before/after runs of results/serve-send: loadgen built at 0c87a4e
# (send: one Send per message; serve: its tasks on goroutines, two latency
# records per message) and at e92938a (send: runs from its producers; serve:
# inline tasks, latencies grouped), 'loadgen serve' and 'loadgen send' of
# the same commit over loopback, in alternating rounds on one quiet
# machine, each round also measuring the plain-TCP ceiling across two
# processes with 'loadgen bench'. About five minutes.
#
#   results/serve-send/reproduce.sh [rounds] [messages]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-4}
messages=${2:-20000000}
dir=$(mktemp -d)
out=results/serve-send/raw
commits=(0c87a4e e92938a)
cleanup() { for c in "${commits[@]}"; do git worktree remove --force "$dir/src-$c" 2>/dev/null || true; done; }
trap cleanup EXIT
for c in "${commits[@]}"; do
	git worktree add --detach "$dir/src-$c" "$c" > /dev/null
	(cd "$dir/src-$c" && go build -o "$dir/loadgen-$c" ./cmd/loadgen)
done
for i in $(seq "$rounds"); do
	for c in "${commits[@]}"; do
		"$dir/loadgen-$c" serve --listen 127.0.0.1:7411 > /dev/null 2>&1 &
		serve=$!
		sleep 0.5
		"$dir/loadgen-$c" send --to 127.0.0.1:7411 --messages "$messages" --json --out "$dir/send-$c-$i" 2> /dev/null |
			tail -1 > "$out/send-$c-$i.json"
		kill -INT "$serve"
		wait "$serve" || true
	done
	"$dir/loadgen-${commits[1]}" bench --topology two --cases throughput --duration 3s --out "$dir/ceiling-$i" --json 2> /dev/null |
		tail -1 > "$out/ceiling-$i.json"
done
