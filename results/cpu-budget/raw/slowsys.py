# The system calls of goroutine LOOP by kind, inside the waits of goroutine WAITER longer than MIN us and over the
# whole trace: count, total and percentiles (us). Usage:
#   go tool trace -d=parsed TRACE > T; python3 slowsys.py WAITER LOOP T MIN
import bisect, collections, re, sys

waiter, loop, path, least = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], float(sys.argv[4]) * 1e3
lines = open(path).read().split('\n')
pat = re.compile(r'^M=-?\d+ P=-?\d+ G=-?\d+ StateTransition Time=(\d+) GoID=(\d+) (\S+)->(\S+)')
calls, waits = [], []
start = kind = wait = None
for i, line in enumerate(lines):
    m = pat.match(line)
    if not m:
        continue
    t, g, a, b = int(m[1]), int(m[2]), m[3], m[4]
    if g == loop and b == 'Syscall':
        start, kind = t, next((l.strip().split(' @')[0].split('.')[-1] for l in lines[i + 1:i + 4] if '@' in l), '?')
    elif g == loop and a == 'Syscall' and start is not None:
        calls.append((start, t, kind))
        start = None
    elif g == waiter and b == 'Waiting':
        wait = t
    elif g == waiter and a == 'Waiting' and wait is not None:
        if t - wait > least:
            waits.append((wait, t))
        wait = None
starts = [c[0] for c in calls]
inside, overall = collections.defaultdict(list), collections.defaultdict(list)
for s, e, k in calls:
    overall[k].append((e - s) / 1e3)
for ws, we in waits:
    i = bisect.bisect_left(starts, ws)
    while i < len(calls) and calls[i][0] < we:
        inside[calls[i][2]].append((calls[i][1] - calls[i][0]) / 1e3)
        i += 1
def show(title, d):
    print(title)
    for k, v in sorted(d.items(), key=lambda kv: -len(kv[1])):
        if len(v) < 10:
            continue
        v.sort()
        print('  %-10s n=%-7d p50 %6.1f  p90 %6.1f  p99 %6.1f  max %7.0f' % (
            k, len(v), v[len(v) // 2], v[int(len(v) * .9)], v[int(len(v) * .99)], v[-1]))
show('inside the %d waits over %.0f us:' % (len(waits), least / 1e3), inside)
show('over the whole trace:', overall)
