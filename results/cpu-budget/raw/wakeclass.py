# Counts the events of `perf script -F event,ip,sym` (sched_wakeup, sched_switch with --call-graph fp) by stack:
# the first two frames under the kernel's, then the first three that are neither the runtime's nor the kernel's.
import sys, collections, re
ev=None; frames=[]; wake=collections.Counter(); sw=collections.Counter()
def flush():
    if ev is None: return
    go=[f for f in frames if not re.match(r'^(\[unknown\]|entry_SYSCALL|do_syscall|__x64|x64_sys|ksys_|__sys|__do|do_|try_to_wake|ttwu|wake_up|__wake|__schedule|schedule|futex|hrtimer|__hrtimer|tcp_|sock_|__sock|sk_|skb|ip_|__ip|__tcp|netif|__netif|net_rx|__napi|napi|process_backlog|loopback|dev_|__dev|handle_softirqs|do_softirq|__local_bh|__softirqentry|ep_|__ep|eventfd|vfs_|new_sync|sock_write|___sys|__se_sys|syscall_exit|exit_to|irqentry|sysvec|asm_|__irq|irq_|lapic|hrtimer_|tick_|update_|__run|run_timer|call_timer|process_timeout|pollwake|__pollwait|autoremove|default_wake|woken_wake|signal_wake|complete|swake|rcu|smp|flush_smp|generic_exec|__flush|sched_ttwu|wake_q|__futex|__x86|do_nanosleep|hrtimer_nanosleep|common_nsleep|schedule_hrtimeout|__ia32|do_epoll|ep_poll|select_estimate|unix_|anon_pipe|pipe_|__wake_up|perf_|__perf|_raw|raw_|preempt_|finish_task|context_switch|__cond|cond_resched|__cpuidle|cpu_startup|do_idle|start_secondary|secondary_startup|common_startup|x86_|kvm|default_idle|arch_cpu|cpuidle|mwait|sched_|pick_|set_next|put_prev|dequeue|enqueue|activate|check_preempt|resched|task_|__task|select_task|wake_affine|update_curr|__update|kthread|worker_thread|process_one_work|ret_from_fork)', f)]
    nonrt=[f for f in go if not f.startswith('runtime.') and not f.startswith('internal/runtime') and not f.startswith('syscall.')]
    key=' < '.join(go[:2])+' || '+' < '.join(nonrt[:3])
    if ev=='sched:sched_wakeup': wake[key]+=1
    else: sw[key]+=1
for line in sys.stdin:
    line=line.rstrip()
    m=re.match(r'^\s*(sched:sched_\w+):', line)
    if m:
        flush(); ev=m.group(1); frames=[]; continue
    p=line.strip().split(None,1)
    if len(p)==2:
        sym=re.sub(r'\+0x[0-9a-f]+$','',p[1]).replace('github.com/sluicehq/sluice/','').replace('github.com/panjf2000/gnet/v2','gnet')
        frames.append(sym)
flush()
print('wakeups', sum(wake.values()))
for k,v in wake.most_common(12): print('  W %5d %s'%(v,k))
print('switches', sum(sw.values()))
for k,v in sw.most_common(12): print('  S %5d %s'%(v,k))
