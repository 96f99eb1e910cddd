import sys, re, collections
# per goroutine: time in each state; waits by reason
cur = {}  # gid -> (state, since, reason)
tot = collections.defaultdict(lambda: collections.Counter())
waits = collections.defaultdict(lambda: collections.Counter())
waitn = collections.defaultdict(lambda: collections.Counter())
hist = collections.defaultdict(list)
first=last=None
pat = re.compile(r'Time=(\d+) GoID=(\d+) (\w+)->(\w+) Reason="([^"]*)"')
for line in sys.stdin:
    if 'StateTransition' not in line or 'GoID=' not in line: continue
    m = pat.search(line)
    if not m: continue
    t, g, a, b, r = int(m[1]), int(m[2]), m[3], m[4], m[5]
    if first is None: first = t
    last = t
    if g in cur:
        st, since, rr = cur[g]
        d = t - since
        tot[g][st] += d
        if st in ('Waiting','Syscall','Runnable'):
            waits[g][(st, rr)] += d; waitn[g][(st, rr)] += 1
            hist[(g,st)].append(d)
    cur[g] = (b, t, r)
span = last-first
print("span ms", span/1e6)
busy = sorted(tot, key=lambda g: -tot[g]['Running'])[:6]
for g in busy:
    print("G%d"%g, {k: "%.1f%%"%(100*v/span) for k,v in tot[g].items()})
    for k,v in waits[g].most_common(5):
        print("    ", k, "%.1f%% n=%d mean=%.1fus"%(100*v/span, waitn[g][k], v/waitn[g][k]/1e3))
    for st in ('Waiting','Runnable','Syscall'):
        h = sorted(hist[(g,st)])
        if h: print("     %s n=%d p50=%.1fus p90=%.1fus p99=%.1fus"%(st, len(h), h[len(h)//2]/1e3, h[int(len(h)*.9)]/1e3, h[int(len(h)*.99)]/1e3))
