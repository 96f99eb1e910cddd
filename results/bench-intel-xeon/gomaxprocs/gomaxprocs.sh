#!/bin/bash
# One loadgen serve and one loadgen send (100 B, one channel, full speed) on this
# machine, each at a GOMAXPROCS of its own, in alternating rounds: the rate send
# prints for seconds 3-5, and over 4 s of steady state each process's CPU (cores
# busy) and context switches a second (voluntary: a thread slept; involuntary: the
# kernel preempted it), with the machine's idle and stolen shares from /proc/stat.
# Usage: results/bench-intel-xeon/gomaxprocs/gomaxprocs.sh [rounds]   (about 30 s a round)
set -u
cd "$(dirname "$0")/../../.."
go build -o /tmp/sluice-loadgen ./cmd/loadgen || exit 1
lg=/tmp/sluice-loadgen
one() { # sender's GOMAXPROCS, serve's GOMAXPROCS
	GOMAXPROCS=$2 $lg serve --listen 127.0.0.1:7601 >/dev/null 2>&1 &
	local sp=$!
	sleep 0.5
	GOMAXPROCS=$1 $lg send --to 127.0.0.1:7601 --messages 200000000 >/tmp/gomaxprocs-send.txt 2>&1 &
	local cp=$!
	sleep 2
	snap() {
		local v=0 n=0 s
		for s in /proc/$1/task/*/status; do
			v=$((v + $(awk '/^voluntary_ctxt/{print $2}' "$s")))
			n=$((n + $(awk '/^nonvoluntary_ctxt/{print $2}' "$s")))
		done
		echo "$(awk '{print $14+$15}' /proc/$1/stat) $v $n"
	}
	local a1 b1 s1 a2 b2 s2
	a1=$(snap $cp) b1=$(snap $sp) s1=$(grep '^cpu ' /proc/stat)
	sleep 4
	a2=$(snap $cp) b2=$(snap $sp) s2=$(grep '^cpu ' /proc/stat)
	kill -KILL $cp # at once: an interrupted send would wait for acks from a serve killed with it
	kill $sp
	wait $cp $sp 2>/dev/null
	python3 - "$a1" "$a2" "$b1" "$b2" "$s1" "$s2" "$1" "$2" "$(grep -E 't=[3-5]s' /tmp/gomaxprocs-send.txt | awk '{printf "%s ", $3}')" <<'E'
import sys
a1, a2, b1, b2 = [list(map(int, x.split())) for x in sys.argv[1:5]]
s1 = list(map(int, sys.argv[5].split()[1:])); s2 = list(map(int, sys.argv[6].split()[1:]))
d = [y - x for x, y in zip(s1, s2)]
hz = 100 * 4
print("send P=%s serve P=%s: %-16s M msgs/s | send %.2f cores, %5d vol %5d invol cs/s | serve %.2f cores, %5d vol %5d invol cs/s | idle %4.1f%% stolen %.1f%%" % (
    sys.argv[7], sys.argv[8], sys.argv[9], (a2[0]-a1[0])/hz, (a2[1]-a1[1])/4, (a2[2]-a1[2])/4,
    (b2[0]-b1[0])/hz, (b2[1]-b1[1])/4, (b2[2]-b1[2])/4, 100*d[3]/sum(d), 100*d[7]/sum(d)))
E
}
for r in $(seq "${1:-3}"); do
	one 2 2; one 1 2; one 1 1; one 2 1
done
