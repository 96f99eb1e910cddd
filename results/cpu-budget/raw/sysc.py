import sys, re, collections
G=sys.argv[1]
lines=sys.stdin.read().split('\n')
pat=re.compile(r'Time=(\d+) GoID='+G+r' (\w+)->(\w+)')
cur=None; start=0; agg=collections.defaultdict(list)
i=0
while i < len(lines):
    l=lines[i]; m=pat.search(l)
    if m:
        t=int(m[1])
        if m[2]=='Running' and m[3]=='Syscall':
            # stack follows
            st=[]; j=i+1
            while j<len(lines) and (lines[j].startswith('\t') or lines[j].startswith('TransitionStack') or lines[j].startswith('Stack')):
                if lines[j].startswith('\t') and not lines[j].startswith('\t\t'): st.append(lines[j].strip().split(' @')[0])
                j+=1
            key=next((s for s in st if 'unix.' in s or 'syscall.' in s.lower() and 'Syscall' not in s), st[1] if len(st)>1 else '?')
            key=' < '.join(s for s in st[:6] if 'runtime' not in s and 'internal' not in s)[:150]
            cur=key; start=t
        elif m[2]=='Syscall' and cur:
            agg[cur].append(t-start); cur=None
    i+=1
for k,v in sorted(agg.items(), key=lambda kv:-sum(kv[1]))[:8]:
    v.sort(); print("%6d calls total %.1fms mean %.1fus p50 %.1f p90 %.1f  %s"%(len(v), sum(v)/1e6, sum(v)/len(v)/1e3, v[len(v)//2]/1e3, v[int(len(v)*.9)]/1e3, k))
