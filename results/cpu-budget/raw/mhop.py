# usage: python3 mhop.py TRACE.parsed  (go tool trace -d=parsed output): each busy goroutine's runs a second, how often it
# resumes on another thread (M) than last time, its state transitions, and the Ps' idle/running transitions.
import re, sys, collections
# counts per goroutine: transitions, and how often a goroutine starts running on another M than last time
pat = re.compile(r'^M=(-?\d+) P=(-?\d+) G=(-?\d+) StateTransition Time=(\d+) (GoID|ProcID)=(\d+) (\S+)->(\S+) Reason="([^"]*)"')
lastM = {}
hops = collections.Counter(); runs = collections.Counter()
trans = collections.Counter()
procs = collections.Counter()
t0 = t1 = None
for line in open(sys.argv[1]):
    m = pat.match(line)
    if not m: continue
    M, P, G, T, kind, ID, a, b, why = m.groups()
    T = int(T); t0 = t0 or T; t1 = T
    if kind == 'ProcID':
        procs[(a, b)] += 1
        continue
    g = int(ID)
    trans[(g, a, b, why)] += 1
    if b == 'Running':
        runs[g] += 1
        if g in lastM and lastM[g] != M:
            hops[g] += 1
        lastM[g] = M
span = (t1 - t0) / 1e9
print('span %.3f s' % span)
for g, n in runs.most_common(4):
    print('G%d runs %d/s, on another M than last time %d/s' % (g, n / span, hops[g] / span))
    for (gg, a, b, why), c in sorted(trans.items(), key=lambda x: -x[1]):
        if gg == g and c / span > 50:
            print('    %s->%s %s: %d/s' % (a, b, why, c / span))
for (a, b), c in procs.most_common():
    print('P %s->%s %d/s' % (a, b, c / span))
