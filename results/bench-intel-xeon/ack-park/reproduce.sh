#!/bin/bash
# Builds loadgen and the transport benchmarks at 4be9d09 (before) and $NEW
# (default 1892e07, the final code; 38e2843, ab90814 and 8132409 are the
# variants measured on the way, README.md) and runs them in alternating
# rounds:
#  - 'loadgen run --scenario transport' (100 B, runs of 64, one channel, one
#    process, 4 s): loadgen-<rev>.txt;
#  - the go test benchmarks of one channel (one Send a message, and runs of
#    64) for a fixed number of messages under /usr/bin/time, so that their
#    CPU seconds compare: gotest-<rev>.txt;
#  - across two processes, 'loadgen bench --cases throughput --topology two
#    --duration 3s' (ROUNDS_TWO rounds, default 4): two-<rev>/<round>-<version>/bench.json,
#    with the CPU time the host stole during each run in two-<rev>/steal.txt.
# The CPU time stolen over the first two parts goes to steal-<rev>.txt (from
# /proc/stat). About ten minutes.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
here=$(pwd)
tmp=$(mktemp -d)
trap 'for v in base new; do git -C "$root" worktree remove --force "$tmp/$v" >/dev/null 2>&1 || true; done; rm -rf "$tmp"' EXIT
new=${NEW:-1892e07}
for v in base:4be9d09 new:$new; do
  name=${v%%:*}; rev=${v##*:}
  git -C "$root" worktree add -q "$tmp/$name" "$rev"
  (cd "$tmp/$name" && go build -o "$tmp/loadgen-$name" ./cmd/loadgen && go test -c -o "$tmp/transport-$name.test" ./transport)
done
rounds=${ROUNDS:-8}
steal() { head -1 /proc/stat; }
s0=$(steal)
: > "loadgen-$new.txt"; : > "gotest-$new.txt"
cd "$tmp"
for i in $(seq "$rounds"); do
  for v in base new; do
    r=$("$tmp/loadgen-$v" run --scenario transport --size 100 --duration 4s --out "$tmp/out" | grep '^| throughput' | awk '{print $4}')
    echo "$i $v $r" >> "$here/loadgen-$new.txt"
  done
done
cd "$root/transport"
for bench in 'Transport1ChannelRuns64:40000000' 'Transport1Channel$:30000000'; do
  for i in $(seq "$rounds"); do
    for v in base new; do
      out=$( { /usr/bin/time -f "TIME %U %S" "$tmp/transport-$v.test" -test.run '^$' -test.bench "${bench%%:*}" -test.benchtime "${bench##*:}x"; } 2>&1 )
      ns=$(echo "$out" | awk '/^Benchmark/ {print $1, $3}')
      cpu=$(echo "$out" | awk '/^TIME/ {print $2 + $3}')
      echo "$i $v $ns cpu_s $cpu" >> "$here/gotest-$new.txt"
    done
  done
done
s1=$(steal)
printf '%s\n%s\n' "$s0" "$s1" | awk 'NR==1{for(i=2;i<=11;i++)a[i]=$i} NR==2{t=0; for(i=2;i<=11;i++)t+=$i-a[i]; printf "CPU time stolen over the rounds: %.1f %%\n", 100*($9-a[9])/t}' | tee "$here/steal-$new.txt"
two=two-$new
mkdir -p "$here/$two"; : > "$here/$two/steal.txt"
cd "$tmp"
for i in $(seq "${ROUNDS_TWO:-4}"); do
  for v in base new; do
    s0=$(head -1 /proc/stat)
    "$tmp/loadgen-$v" bench --cases throughput --topology two --duration 3s --out "$tmp/out" > /dev/null
    s1=$(head -1 /proc/stat)
    mkdir -p "$here/$two/$i-$v"; cp "$tmp/out/bench.json" "$here/$two/$i-$v/"
    printf '%s\n%s\n' "$s0" "$s1" | awk -v r="$i-$v" 'NR==1{for(i=2;i<=11;i++)a[i]=$i} NR==2{t=0; for(i=2;i<=11;i++)t+=$i-a[i]; printf "%s %.1f %% stolen\n", r, 100*($9-a[9])/t}' >> "$here/$two/steal.txt"
  done
done
