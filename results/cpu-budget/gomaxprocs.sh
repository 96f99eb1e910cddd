#!/usr/bin/env bash
# How the number of Ps in each process moves throughput and CPU per message
# across two processes (loadgen serve / send on loopback), and what it does
# to latency at a fixed rate. Needs /usr/bin/time (Debian package "time").
# Writes under /tmp/cpu-budget-gomaxprocs; about five minutes.
#
# usage: gomaxprocs.sh [rounds]
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-3}
out=/tmp/cpu-budget-gomaxprocs
mkdir -p $out
go build -o $out/loadgen ./cmd/loadgen
lg=$out/loadgen
addr=127.0.0.1:7419
# A failed send must not leave its serve holding the port.
trap 'pkill -INT -f "$lg serve --listen $addr" || true' EXIT

# pair SERVE_PROCS SEND_PROCS LABEL [send flags...]: one serve/send pair; prints
# the send report's figures with each process's CPU per message and the
# sender's context switches per message.
pair() {
	local sp=$1 dp=$2 label=$3
	shift 3
	GOMAXPROCS=$sp /usr/bin/time -f "%U %S %w %c" -o $out/serve.time $lg serve --listen $addr >/dev/null 2>&1 &
	local pid=$!
	sleep 0.5
	GOMAXPROCS=$dp /usr/bin/time -f "%U %S %w %c" -o $out/send.time $lg send --to $addr --json --out $out/send "$@" >$out/send.log 2>/dev/null
	# /usr/bin/time passes no signal on: stop serve itself.
	pkill -INT -f "$lg serve --listen $addr"
	wait $pid || true
	python3 - "$label" $out <<'PY'
import json, sys
label, out = sys.argv[1], sys.argv[2]
r = json.loads(open(out + '/send.log').read().strip().splitlines()[-1])
n = r['messages_delivered']
def cpu(f):
    u, s, w, c = map(float, open(f).read().split()[-4:])
    return (u + s) / n * 1e9, w / n, c / n
d, dw, dc = cpu(out + '/send.time')
v, _, _ = cpu(out + '/serve.time')
lat = r['latency_us']
print('%-24s %6.2f M msgs/s  send %4.0f ns/msg  serve %4.0f ns/msg  total %4.0f  send csw/msg vol %.5f invol %.5f  p50 %.0f p99 %.0f p99.9 %.0f us  exactly_once %s' % (
    label, r['throughput_msgs_per_s'] / 1e6, d, v, d + v, dw, dc, lat['p50'], lat['p99'], lat['p999'], r['exactly_once']))
PY
}

echo "# $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores, $(go version | cut -d' ' -f3), commit $(git rev-parse --short HEAD)"
echo "# full speed, 100 B, one channel, 30 M messages; GOMAXPROCS serve/send"
for i in $(seq $rounds); do
	for c in "2 2" "2 1" "1 2" "1 1"; do
		set -- $c
		pair $1 $2 "round $i: serve $1 send $2" --messages 30000000
	done
done
echo "# fixed rate 100,000 msgs/s, 100 B, 500,000 messages; GOMAXPROCS serve/send"
for i in $(seq $rounds); do
	for c in "2 2" "2 1"; do
		set -- $c
		pair $1 $2 "round $i: serve $1 send $2" --rate 100000 --messages 500000
	done
done
echo "# loadgen bench --cases throughput --topology two: both processes at GOMAXPROCS=2, then 1 (the plain-TCP ceiling in the same run)"
for i in $(seq $rounds); do
	for p in 2 1; do
		GOMAXPROCS=$p $lg bench --cases throughput --topology two --duration 4s --json --out $out/bench-p$p-$i >$out/bench.log 2>/dev/null || true
		python3 - $p $i $out/bench.log <<'PY'
import json, sys
p, i, f = sys.argv[1:]
sc = json.loads(open(f).read().strip().splitlines()[-1])
rows = []
ceil = None
for r in sc['runs']:
    fg = r['figures']
    name = r['id'].split('/', 1)[1]
    if name == 'tcp-ceiling':
        ceil = fg['msgs_per_s']
    rows.append('%s %.2fM %.0fns %.2fc' % (name, fg['msgs_per_s'] / 1e6, fg.get('cpu_ns_per_msg', 0), fg.get('cpu_cores', 0)))
ratios = ['%s %.2fx' % (r['id'].split('/', 1)[1], r['figures']['msgs_per_s'] / ceil) for r in sc['runs'] if 'tcp' not in r['id']]
print('round %s GOMAXPROCS=%s: %s | %s' % (i, p, ' | '.join(rows), ', '.join(ratios)))
PY
	done
done
echo "# one process, go test: the transport's loop and the producer on one P, then two (3 s each)"
go test -c -o $out/transport.test ./transport
for i in $(seq $rounds); do
	for p in 1 2; do
		GOMAXPROCS=$p $out/transport.test -test.run '^$' -test.bench 'PlainTCPIdealBatching$|Transport1Channel$|Transport1ChannelRuns64$' -test.benchtime 3s |
			awk -v p=$p -v i=$i '/^Benchmark/ {printf "round %s GOMAXPROCS=%s %s %s ns/op\n", i, p, $1, $3}'
	done
done
