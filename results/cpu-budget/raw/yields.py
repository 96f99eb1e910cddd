# After each yield of goroutine LOOP (Running -> Runnable, runtime.Gosched), which goroutines ran before it ran
# again, whether it came back on the same P, and how long it waited (us). Usage:
#   go tool trace -d=parsed TRACE | python3 yields.py LOOP
import collections, re, sys

loop = int(sys.argv[1])
pat = re.compile(r'^M=-?\d+ P=(-?\d+) G=-?\d+ StateTransition Time=(\d+) GoID=(\d+) (\S+)->(\S+)')
since = None
waits = collections.defaultdict(list)
for line in sys.stdin:
    m = pat.match(line)
    if not m:
        continue
    p, t, g, a, b = m[1], int(m[2]), int(m[3]), m[4], m[5]
    if g == loop and a == 'Running' and b == 'Runnable':
        since, atP, ran = t, p, set()
    elif since is not None and g != loop and b == 'Running':
        ran.add('G%d%s' % (g, '' if p == atP else ' (other P)'))
    elif since is not None and g == loop and b == 'Running':
        waits[(', '.join(sorted(ran)) or 'nobody', 'same P' if p == atP else 'other P')].append((t - since) / 1e3)
        since = None
for k, v in sorted(waits.items(), key=lambda kv: -len(kv[1]))[:8]:
    v.sort()
    print('%6d  ran meanwhile: %-28s back on the %-7s  p50 %5.1f  mean %5.1f  p90 %5.1f us' % (
        len(v), k[0], k[1], v[len(v) // 2], sum(v) / len(v), v[int(len(v) * .9)]))
