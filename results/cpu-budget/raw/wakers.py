# usage: python3 wakers.py TRACE.parsed GOID [N]: the N most frequent stacks that made goroutine GOID runnable.
import re, sys, collections
lines = open(sys.argv[1]).read().split('\n'); gid = sys.argv[2]
pat = re.compile(r'^M=(-?\d+) P=(-?\d+) G=(-?\d+) StateTransition Time=(\d+) GoID=(\d+) (\S+)->(\S+) Reason="([^"]*)"')
c = collections.Counter(); i = 0; n = len(lines)
while i < n:
    m = pat.match(lines[i])
    if m and m.group(5) == gid and m.group(6) == 'Waiting' and m.group(7) == 'Runnable':
        j = i + 1; frames = []
        while j < n and not lines[j].startswith('M='):
            l = lines[j].strip()
            if l and not l.startswith('/') and not l.startswith('Stack') and not l.startswith('TransitionStack'):
                frames.append(re.sub(r' @ 0x[0-9a-f]+', '', l).replace('github.com/sluicehq/sluice/', ''))
            j += 1
        c[' < '.join(frames[1:6])] += 1
        i = j; continue
    i += 1
for k, v in c.most_common(int(sys.argv[3]) if len(sys.argv) > 3 else 8):
    print(v, k or '(runtime: its timer)')
