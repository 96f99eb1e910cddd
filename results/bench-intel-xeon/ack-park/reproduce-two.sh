#!/bin/bash
# Across two processes: 'loadgen bench --cases throughput --topology two
# --duration 3s' at 4be9d09 (before) and $NEW (after; default ab90814, the
# final code; 38e2843 parked an ack at once), in alternating rounds; each
# run's bench.json goes to two-<rev>/<round>-<version>/, and the CPU time
# the host stole during each run to two-<rev>/steal.txt. About four minutes.
set -euo pipefail
root=$(git rev-parse --show-toplevel)
here=$(pwd)
tmp=$(mktemp -d)
trap 'for v in base new; do git -C "$root" worktree remove --force "$tmp/$v" >/dev/null 2>&1 || true; done; rm -rf "$tmp"' EXIT
new=${NEW:-1892e07}
for v in base:4be9d09 new:$new; do
  name=${v%%:*}; rev=${v##*:}
  git -C "$root" worktree add -q "$tmp/$name" "$rev"
  (cd "$tmp/$name" && go build -o "$tmp/loadgen-$name" ./cmd/loadgen)
done
two=two-$new
mkdir -p "$two"; : > "$two/steal.txt"
cd "$tmp"
for i in $(seq "${ROUNDS:-4}"); do
  for v in base new; do
    s0=$(head -1 /proc/stat)
    "$tmp/loadgen-$v" bench --cases throughput --topology two --duration 3s --out "$tmp/out" > /dev/null
    s1=$(head -1 /proc/stat)
    mkdir -p "$here/$two/$i-$v"; cp "$tmp/out/bench.json" "$here/$two/$i-$v/"
    printf '%s\n%s\n' "$s0" "$s1" | awk -v r="$i-$v" 'NR==1{for(i=2;i<=11;i++)a[i]=$i} NR==2{t=0; for(i=2;i<=11;i++)t+=$i-a[i]; printf "%s %.1f %% stolen\n", r, 100*($9-a[9])/t}' >> "$here/$two/steal.txt"
  done
done
