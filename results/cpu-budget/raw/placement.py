# Where the threads of one program ran and who woke whom, from
#   perf record -e sched:sched_switch,sched:sched_wakeup -a -o F -- sleep 1
#   perf script -i F -F comm,tid,cpu,time,event,trace | python3 placement.py COMM
# (COMM: the program's thread name, e.g. t.test or lg). Prints the seconds each CPU spent running COMM, others and
# idle; the wake-ups of COMM's threads by waker and by whether the woken thread was put on the waker's CPU; and
# the switches from one COMM thread to another by how the first left (S slept, R was preempted, D waited in the
# kernel).
import collections, re, sys

prog = sys.argv[1]
busy = collections.Counter()
cur = {}
wakes = collections.Counter()
switches = collections.Counter()
line = re.compile(r'\s*(\S+)\s+(\d+)\s+\[(\d+)\]\s+([\d.]+):\s+sched:(\w+):\s+(.*)')
for l in sys.stdin:
    m = line.match(l)
    if not m:
        continue
    comm, _, cpu, t, ev, tr = m.groups()
    t, cpu = float(t), int(cpu)
    if ev == 'sched_switch':
        s = re.search(r'prev_comm=(\S+) prev_pid=\d+ .*prev_state=(\S+) ==> next_comm=(\S+) next_pid=\d+', tr)
        prev, state, nxt = s.groups()
        if cpu in cur:
            since, who = cur[cpu]
            busy[(cpu, who)] += t - since
        cur[cpu] = (t, prog if nxt == prog else 'idle' if nxt.startswith('swapper') else 'other')
        if prev == prog and nxt == prog:
            switches[state] += 1
    elif ev == 'sched_wakeup':
        s = re.search(r'comm=(\S+) pid=\d+ .*target_cpu=(\d+)', tr)
        wakee, target = s.groups()
        if wakee == prog:
            waker = prog if comm == prog else 'idle CPU' if comm == 'swapper' else 'other'
            wakes[(waker, "the waker's CPU" if int(target) == cpu else 'the other CPU')] += 1
print('seconds by CPU:', ', '.join('cpu%d %s %.3f' % (c, w, v) for (c, w), v in sorted(busy.items())))
print('wake-ups of %s threads (by, put on):' % prog, ', '.join('%s -> %s %d' % (a, b, v) for (a, b), v in wakes.most_common()))
print('%s -> %s switches by how the first left:' % (prog, prog), dict(switches))
