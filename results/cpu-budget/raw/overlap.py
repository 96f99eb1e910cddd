import sys, re, collections
# For goroutine LOOP's Runnable intervals, tally which goroutines are Running / in Syscall concurrently
LOOP=int(sys.argv[1])
pat = re.compile(r'Time=(\d+) GoID=(\d+) (\w+)->(\w+) Reason="([^"]*)"')
ev=[]
for line in sys.stdin:
    if 'StateTransition' not in line or 'GoID=' not in line: continue
    m = pat.search(line)
    if m: ev.append((int(m[1]), int(m[2]), m[3], m[4], m[5]))
state={}
acc=collections.Counter(); total=0
lastt=None
inrun=False
for t,g,a,b,r in ev:
    if lastt is not None and state.get(LOOP)=='Runnable':
        d=t-lastt; total+=d
        others=tuple(sorted((gg,s) for gg,s in state.items() if gg!=LOOP and s in('Running','Syscall')))
        acc[others]+=d
    state[g]=b; lastt=t
print("loop runnable total ms %.1f"%(total/1e6))
for k,v in acc.most_common(8): print("%.1f%%"%(100*v/total), k)
