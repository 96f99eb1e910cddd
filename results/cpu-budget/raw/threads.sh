#!/bin/bash
# threads.sh SEND_PROCS: per-thread context switches and CPU of loadgen send at full speed (a 1 s sample of
# /proc/<pid>/task/*/status and stat, 2 s into the run), serve at GOMAXPROCS=2. Build the binary first:
#   go build -o /tmp/lgb ./cmd/loadgen
(GOMAXPROCS=2 /tmp/lgb serve --listen 127.0.0.1:7413 >/dev/null 2>&1 &) ; sleep 0.5
(GOMAXPROCS=$1 /tmp/lgb send --to 127.0.0.1:7413 --messages 60000000 --json --out /tmp/x > /tmp/send.log 2>&1 &); sleep 2
pid=$(pgrep -f "^/tmp/lgb send --to 127.0.0.1:7413")
snap(){ for t in /proc/$pid/task/*; do echo "$(basename $t) $(awk '/^voluntary/{v=$2} /^nonvoluntary/{n=$2} END{print v, n}' $t/status) $(awk '{print $14+$15}' $t/stat)"; done; }
snap > /tmp/s1; sleep 1; snap > /tmp/s2
join /tmp/s1 /tmp/s2 | awk -v p=$1 '{dv=$5-$2; dn=$6-$3; dc=$7-$4; tv+=dv; tn+=dn; tc+=dc; if (dc>0||dv>10) printf "GOMAXPROCS=%s thread %s: voluntary %d/s involuntary %d/s cpu %d%%\n", p, $1, dv, dn, dc} END {printf "GOMAXPROCS=%s all threads: voluntary %d/s involuntary %d/s cpu %d%%\n", p, tv, tn, tc}'
while pgrep -f "^/tmp/lgb send --to 127.0.0.1:7413" >/dev/null; do sleep 0.5; done
pkill -INT -f "lgb serve --listen 127.0.0.1:7413"; sleep 0.5
grep -o '"throughput_msgs_per_s":[0-9.]*' /tmp/send.log
