#!/bin/bash
# The pipeline (100 B, as fast as it goes, 5 s, checkpoints every second) with one engine worker on an agent
# in each of 3 network-namespace hosts on a bridge, against the same run in one process (chained, and with
# every edge on the transport) and in 3 local processes, alternating, twice. Needs root (ip netns).
# Usage: LOADGEN=path/to/loadgen OUT=dir measure.sh
set -e
LG=${LOADGEN:-loadgen}
OUT=${OUT:-/tmp/pipeline-3hosts}
mkdir -p $OUT; rm -f $OUT/pids
id=m$$
ip netns add sw-$id; ip -n sw-$id link add br0 type bridge; ip -n sw-$id link set br0 up
for i in 0 1 2; do
  ip netns add h$i-$id
  ip link add v${i}h$$ type veth peer name v${i}s$$
  ip link set v${i}s$$ netns sw-$id; ip -n sw-$id link set v${i}s$$ master br0; ip -n sw-$id link set v${i}s$$ up
  ip link set v${i}h$$ netns h$i-$id; ip -n h$i-$id addr add 10.78.0.$((i+1))/24 dev v${i}h$$
  ip -n h$i-$id link set v${i}h$$ up; ip -n h$i-$id link set lo up
  ip netns exec h$i-$id $LG agent --listen 10.78.0.$((i+1)):7500 --data-dir $OUT/agent$i > $OUT/agent$i.log 2>&1 &
  echo $! >> $OUT/pids
done
sleep 0.5
AG=10.78.0.1:7500,10.78.0.2:7500,10.78.0.3:7500
for round in 1 2; do
  ip netns exec h0-$id $LG coordinate --scenario pipeline --agents $AG --duration 5s --checkpoint-every 1s --out $OUT/hosts-$round --json 2>/dev/null | tail -1 > $OUT/hosts-$round.json
  $LG run --scenario pipeline --duration 5s --out $OUT/one-$round --json 2>/dev/null | tail -1 > $OUT/one-$round.json
  $LG run --scenario pipeline --duration 5s --chain=false --out $OUT/nochain-$round --json 2>/dev/null | tail -1 > $OUT/nochain-$round.json
  $LG run --scenario pipeline --duration 5s --nodes 3 --out $OUT/nodes3-$round --json 2>/dev/null | tail -1 > $OUT/nodes3-$round.json
done
for p in $(cat $OUT/pids); do kill $p; done
sleep 0.5
for i in 0 1 2; do ip netns del h$i-$id; done
ip netns del sw-$id
for f in $OUT/*.json; do
  echo "$(basename $f .json) $(grep -o '"throughput_msgs_per_s":[0-9.e+]*' $f) $(grep -o '"exactly_once":[a-z]*' $f)"
done
