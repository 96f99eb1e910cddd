#!/bin/bash
# Builds the transport benchmarks at b1c8ce6 (before) and 2e874ef (after), both
# with 2e874ef's latency_test.go (which adds BenchmarkTransportPingPongTaskInline),
# runs them in 8 alternating rounds and compares them with benchstat. About five minutes.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
tmp=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$tmp/base" >/dev/null 2>&1 || true; rm -rf "$tmp"' EXIT
git -C "$root" worktree add -q "$tmp/base" b1c8ce6
git -C "$root" show 2e874ef:transport/latency_test.go > "$tmp/base/transport/latency_test.go"
(cd "$tmp/base" && go test -c -o "$tmp/base.test" ./transport)
git -C "$root" worktree add -q "$tmp/new" 2e874ef
(cd "$tmp/new" && go test -c -o "$tmp/new.test" ./transport)
git -C "$root" worktree remove --force "$tmp/new"
re='TransportPingPongTaskInline|TransportPingPongTask$|TransportPingPongInline$|PlainTCPPingPong$|Transport1Channel$|Transport1ChannelRuns64$'
: > base-b1c8ce6.txt; : > new-2e874ef.txt
for i in $(seq 8); do
  "$tmp/base.test" -test.run '^$' -test.bench "$re" -test.benchtime 1s | grep Bench >> base-b1c8ce6.txt
  "$tmp/new.test" -test.run '^$' -test.bench "$re" -test.benchtime 1s | grep Bench >> new-2e874ef.txt
done
go run golang.org/x/perf/cmd/benchstat@v0.0.0-20260908200009-22c9c6c9d4da base-b1c8ce6.txt new-2e874ef.txt | tee benchstat.txt
