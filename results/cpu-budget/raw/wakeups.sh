#!/bin/bash
# usage: wakeups.sh BIN: perf sched_wakeup and sched_switch of a `loadgen send` process (BIN send --rate 0, 60 M
# messages to BIN serve) over 2 s mid-run, counted by the Go frames of the waker and of the thread that slept
# (wakeclass.py, in this folder). Needs perf; run from the repository root.
B=$1
$B serve --listen 127.0.0.1:7021 > /dev/null 2>&1 & sp=$!
sleep 0.5
$B send --to 127.0.0.1:7021 --rate 0 --messages 60000000 --out /tmp/wk.out > /tmp/wk.log 2>&1 & cp=$!
sleep 1.5
perf record -q -e sched:sched_wakeup,sched:sched_switch --call-graph fp -p $cp -o /tmp/wk.data -- sleep 2 2>/dev/null
wait $cp
kill $sp; wait $sp 2>/dev/null
echo "$(basename $B): $(grep '| throughput' /tmp/wk.log | sed -E 's/.*\| ([0-9.]+ M msgs\/s).*/\1/')"
perf script -i /tmp/wk.data -F event,ip,sym 2>/dev/null | python3 results/cpu-budget/raw/wakeclass.py
