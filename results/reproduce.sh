#!/usr/bin/env bash
# Re-runs every published figure in results/ on this machine and writes the
# reports next to this script. Each block is one row of results/README.md;
# run one by hand to reproduce one figure. Takes about twelve minutes, and
# about ninety more for the before/after scripts at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
go build -o /tmp/sluice-loadgen ./cmd/loadgen
lg=/tmp/sluice-loadgen
out=results

# Transport benchmarks beside the plain-TCP ceiling, in one run.
go test -run '^$' -bench 'PlainTCP|Transport1Channel$|Transport1ChannelGoroutine|Transport1ChannelRuns64|Transport1ChannelNetBackend|Transport1ChannelTLS|Transport10000Channels|TransportLooseWindow|TransportDataLoss5|TransportPingPong|TransportPingPongNetBackend|TransportFixedRate100k|FixedRate100kDriverAlone|RawSocketFixedRate100k' \
	-benchtime 3s -count 3 ./transport | tee $out/transport-bench.txt

# Every figure of issue 14 as ratios to baselines measured in the same run,
# both backends, one process and two (about two minutes).
# loadgen bench: issue 14's figures, in a directory named after the CPU model (bench-amd-epyc, ...).
cpu=$(lscpu | sed -n 's/^Model name: *//p' | tr 'A-Z' 'a-z' | tr -cs 'a-z0-9' '-' | sed 's/-$//')
$lg bench --duration 3s --out $out/bench-$cpu
# One node sending to 20 peers, each backend (about 75 s).
$lg bench --cases peers --duration 3s --repeat 3 --out $out/bench-$cpu/peers/$(git rev-parse --short HEAD)

# Throughput by message size, one channel, as fast as the transport allows.
for size in 16 100 1024; do
	$lg run --scenario transport --size $size --duration 10s --out $out/transport-max-$size --json > /dev/null
done
# Sweep: message size x channel count.
$lg sweep --sizes 16,100,1024 --channel-counts 1,100,10000 --duration 5s --out $out/sweep > /dev/null
# Latency at fixed rates (no coordinated omission).
for rate in 10000 100000; do
	$lg run --scenario transport --size 100 --rate $rate --duration 10s --out $out/transport-rate-$rate --json > /dev/null
done
# 10,000 channels over one connection.
$lg run --scenario transport --size 100 --channels 10000 --duration 10s --out $out/transport-10000ch --json > /dev/null
# Faults: 5% of data and of acks lost, 1% duplicated, a reset every 2 s, 64 channels.
$lg run --scenario transport --channels 64 --duration 10s --faults drop=0.05,ctrldrop=0.05,dup=0.01,reset=2s --seed 7 --out $out/transport-faults --json > /dev/null
# A consumer at 1,000 msgs/s against a flat-out producer, 10,000 channels: memory.
$lg run --scenario transport --channels 10000 --consume-rate 1000 --duration 20s --out $out/transport-slow-consumer --json > /dev/null
# The exactly-once pipeline: checkpoints every second; without checkpoints;
# every edge on the transport; two processes.
$lg run --scenario pipeline --size 100 --duration 10s --out $out/pipeline --json > /dev/null
$lg run --scenario pipeline --size 100 --duration 10s --checkpoint-every 1h --out $out/pipeline-no-checkpoints --json > /dev/null
$lg run --scenario pipeline --size 100 --duration 10s --chain=false --out $out/pipeline-transport --json > /dev/null
$lg run --scenario pipeline --size 100 --duration 10s --nodes 2 --out $out/pipeline-2nodes --json > /dev/null
# Word count over 48 MB of real text: clean, under transport faults and
# crashes across 3 processes, and with a process SIGKILLed every 3 s. Each
# output must equal the clean one.
input=/tmp/sluice-wc-input.txt
# (sed, not head: head would stop reading early and, with pipefail, SIGPIPE would end the script)
find /usr/local/go/src -name '*.go' | LC_ALL=C sort | sed -n '1,3000p' | xargs cat > $input
$lg run --scenario wordcount --input $input --output /tmp/sluice-wc-clean.tsv --out $out/wordcount --json > /dev/null
$lg run --scenario wordcount --input $input --output /tmp/sluice-wc-faults.tsv --nodes 3 \
	--faults drop=0.02,ctrldrop=0.02,dup=0.01,reset=1s,crash=2s --seed 5 --out $out/wordcount-faults --json > /dev/null
$lg run --scenario wordcount --input $input --output /tmp/sluice-wc-kill.tsv --nodes 3 --faults kill=3s --seed 3 \
	--out $out/wordcount-kill --json > /dev/null
$lg run --scenario wordcount --input $input --output /tmp/sluice-wc-kill1s.tsv --nodes 3 --faults kill=1s --seed 1 \
	--out $out/wordcount-kill1s --json > /dev/null
cmp /tmp/sluice-wc-clean.tsv /tmp/sluice-wc-faults.tsv
cmp /tmp/sluice-wc-clean.tsv /tmp/sluice-wc-kill.tsv
cmp /tmp/sluice-wc-clean.tsv /tmp/sluice-wc-kill1s.tsv
# Peers in one run.
(cd bench/compare && go run . --size 100 --duration 5s --rounds 3 --out ../../$out/compare --json > /dev/null)
# Watermill Pub/Subs through the same API: Sluice, GoChannel, core NATS; three runs.
(cd watermill && for r in 1 2 3; do go run ./cmd/wmbench -n 50000 -lat 5000 -sizes 100,1024; done > ../$out/watermill/wmbench.txt)
# Issue 16's before/after table (benchstat across three commits, about eight minutes).
results/structure/reproduce.sh
# Issue 14's before/after runs, each alternating old and new builds: the
# window's encoding and spaced acks (about fifteen minutes), loadgen
# send/serve (about five), the fixed-rate driver's clock (about fifty), and
# CPU per message with the cores used (about eight).
results/window-and-acks/reproduce.sh
results/serve-send/reproduce.sh
results/driver-clock/reproduce.sh
results/cpu-budget/reproduce.sh
# Issue 14 on the Intel Xeon VM: serve and send with each process at one P or
# two, alternating (about thirty seconds a round, three rounds).
results/bench-intel-xeon/gomaxprocs/gomaxprocs.sh 3 | tee results/bench-intel-xeon/gomaxprocs/out.txt
