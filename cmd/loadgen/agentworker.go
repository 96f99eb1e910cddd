package main

// Engine workers on agents: `loadgen coordinate --scenario wordcount|pipeline`
// places each engine worker on an agent. The engine's coordinator drives a
// worker over JSON lines, as it drives a `loadgen node` child over its stdin
// and stdout; here the lines travel over a control connection to the agent,
// which runs the `loadgen node` child and copies bytes both ways:
//
//	coordinator -> agent            agent -> coordinator
//	worker {worker plan}            started {pid, machine}, then the worker's stdout
//	the worker's stdin ...
//
// The agent closes the connection once the worker has exited; when the
// connection's coordinator side ends, the agent closes the worker's stdin,
// and the worker ends as a child whose parent died does. A restart is a new
// connection with the same node and listen address. The kill fault opens a
// connection of its own:
//
//	kill {worker plan: job, node}   killed {pid}
//
// and the agent SIGKILLs that node's worker. Once a job can no longer be
// resumed, the coordinator has each agent that ran its workers remove the
// job's directory (and a coordinator that starts over has every agent
// remove the job it discards), on a connection of its own too:
//
//	drop {worker plan: job}         dropped
//
// which the agent refuses while a worker of the job runs or starts.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/sluicehq/sluice/bench"
	"github.com/sluicehq/sluice/bench/jobs"
	"github.com/sluicehq/sluice/cmd/loadgen/internal/control"
	"github.com/sluicehq/sluice/engine"
)

// workers are the engine workers an agent runs, by job and node.
type workers struct {
	mu    sync.Mutex
	procs map[string]*os.Process
	// live counts each job's workers from before they start to after
	// they exit; dropping holds the jobs whose directory is being
	// removed. A job is in at most one of them.
	live     map[string]int
	dropping map[string]bool
}

// begin counts a worker of job as live, unless job is being dropped.
func (w *workers) begin(job string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.dropping[job] {
		return fmt.Errorf("worker: job %s is being dropped here", job)
	}
	w.live[job]++
	return nil
}

// end counts a worker of job, counted by begin, as exited.
func (w *workers) end(job string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.live[job]--; w.live[job] == 0 {
		delete(w.live, job)
	}
}

func workerKey(job string, node int) string { return job + "/" + strconv.Itoa(node) }

// runWorker serves one worker connection: it starts the worker, copies its
// pipes to and from the connection, and returns once the worker has exited.
func (a *agent) runWorker(cc *control.Conn, p *control.WorkerPlan, ctlLocal net.Addr) error {
	if err := p.Validate(true); err != nil {
		return err
	}
	if _, err := jobs.BuildJSON(p.Spec, nil); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if err := checkInput(p); err != nil {
		return err
	}
	// From here until it has exited, the worker keeps a drop of its job
	// away from the directory it writes.
	if err := a.workers.begin(p.Job); err != nil {
		return err
	}
	defer a.workers.end(p.Job)
	listen := p.Listen
	if listen == "" {
		// The worker's address goes to every other worker, so its host
		// must be one they reach: --data-listen's, unless unspecified,
		// else the one the coordinator reached this agent at.
		host, _, err := net.SplitHostPort(a.dataListen)
		if ip := net.ParseIP(host); err != nil || host == "" || ip != nil && ip.IsUnspecified() {
			if host, _, err = net.SplitHostPort(ctlLocal.String()); err != nil {
				return err
			}
		}
		listen = net.JoinHostPort(host, "0")
	}
	exe := a.exe
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return err
		}
	}
	args := []string{"node", "--spec", string(p.Spec), "--dir", filepath.Join(a.workDir, p.Job, fmt.Sprintf("node%d", p.Node)),
		"--listen", listen, "--faults", p.Faults, "--seed", strconv.FormatUint(p.Seed, 10), "--fsync=" + strconv.FormatBool(p.Fsync)}
	cmd := exec.Command(exe, append(args, a.nodeArgs...)...)
	cmd.Stderr = a.stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("worker: starting node %d: %w", p.Node, err)
	}
	key := workerKey(p.Job, p.Node)
	a.workers.mu.Lock()
	a.workers.procs[key] = cmd.Process
	a.workers.mu.Unlock()
	a.logf("started worker %s (pid %d) on %s", key, cmd.Process.Pid, listen)
	if err := cc.Send(control.Msg{Kind: control.KindStarted, Started: &control.Started{Pid: cmd.Process.Pid, Machine: bench.DetectMachine()}}); err != nil {
		_ = cmd.Process.Kill()
	}
	fromCoord, conn := cc.Detach()
	go func() {
		// The coordinator's requests; their end (the coordinator closed
		// its side or died) ends the worker's stdin.
		_, _ = io.Copy(stdin, fromCoord)
		_ = stdin.Close()
	}()
	_, _ = io.Copy(conn, stdout)
	_ = cmd.Wait() // how it ended is cmd.ProcessState, logged below
	a.workers.mu.Lock()
	if a.workers.procs[key] == cmd.Process {
		delete(a.workers.procs, key)
	}
	a.workers.mu.Unlock()
	a.logf("worker %s (pid %d) exited: %v", key, cmd.Process.Pid, cmd.ProcessState)
	return nil
}

// checkInput refuses to run the worker of node 0 of a wordcount job whose
// input this agent cannot read. That worker runs the job's one source,
// which reads the file (engine.Job.Placement puts task i on node i mod
// nodes, and the source is task 0). A path that is wrong on this host is a
// mistake in the command, which no restart mends: started, the source
// would fail, and the engine would restart it until its restart policy
// gave up, reporting that instead.
func checkInput(p *control.WorkerPlan) error {
	var spec jobs.Spec
	if err := json.Unmarshal(p.Spec, &spec); err != nil || spec.Kind != "wordcount" || p.Node != 0 {
		return err
	}
	if err := readableInput(spec.Input); err != nil {
		return fmt.Errorf("worker %d runs the wordcount source, and its --input must be readable at its path on this agent: %w", p.Node, err)
	}
	return nil
}

// killWorker SIGKILLs the worker a kill message names.
func (a *agent) killWorker(cc *control.Conn, p *control.WorkerPlan) error {
	if err := p.Validate(false); err != nil {
		return err
	}
	key := workerKey(p.Job, p.Node)
	a.workers.mu.Lock()
	proc := a.workers.procs[key]
	a.workers.mu.Unlock()
	if proc == nil {
		return fmt.Errorf("kill: no worker %s runs here", key)
	}
	if err := proc.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill: worker %s: %w", key, err)
	}
	a.logf("SIGKILLed worker %s (pid %d)", key, proc.Pid)
	return cc.Send(control.Msg{Kind: control.KindKilled, Started: &control.Started{Pid: proc.Pid}})
}

// dropJob removes the directory of the job a drop message names, and
// answers once it is gone (or was never there). It refuses while a worker
// of the job runs or starts: a worker writing into a directory being
// removed would leave half of it behind, and a job that still runs is not
// done with it.
func (a *agent) dropJob(cc *control.Conn, p *control.WorkerPlan) error {
	if err := p.ValidateDrop(); err != nil {
		return err
	}
	if a.workDir == "" {
		return errors.New("drop: this agent has no directory for engine workers")
	}
	a.workers.mu.Lock()
	live, dropping := a.workers.live[p.Job], a.workers.dropping[p.Job]
	if live == 0 && !dropping {
		a.workers.dropping[p.Job] = true
	}
	a.workers.mu.Unlock()
	switch {
	case live > 0:
		return fmt.Errorf("drop: %d worker(s) of job %s still run here", live, p.Job)
	case dropping:
		return fmt.Errorf("drop: job %s is being dropped already", p.Job)
	}
	// ValidateDrop saw to it that the job is one name, never "." or "..":
	// dir is inside workDir. RemoveAll does not follow a symbolic link.
	dir := filepath.Join(a.workDir, p.Job)
	_, err := os.Lstat(dir)
	had := !errors.Is(err, os.ErrNotExist)
	if had {
		err = os.RemoveAll(dir)
	}
	// Done before the answer, so that the coordinator, once answered,
	// finds the job neither being dropped nor there.
	a.workers.mu.Lock()
	delete(a.workers.dropping, p.Job)
	a.workers.mu.Unlock()
	switch {
	case had && err != nil:
		return fmt.Errorf("drop: %w", err)
	case had:
		a.logf("dropped job %s: removed %s", p.Job, dir)
	default:
		a.logf("dropped job %s: it has no directory here", p.Job)
	}
	return cc.Send(control.Msg{Kind: control.KindDropped})
}

// agentLauncher places a job's engine workers on agents, node i on agent
// i mod len(agents).
type agentLauncher struct {
	agents  []string
	key     []byte
	job     string
	spec    []byte
	fsync   bool
	timeout time.Duration
	faults  func(node int) (faults string, seed uint64)

	mu       sync.Mutex
	machines map[string]bench.Machine // by agent
	launched map[int]bool             // the nodes whose agents were asked to start a worker
}

func (l *agentLauncher) agent(node int) string { return l.agents[node%len(l.agents)] }

func (l *agentLauncher) dial(ctx context.Context, node int) (*control.Conn, error) {
	addr := l.agent(node)
	d := net.Dialer{Timeout: l.timeout}
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, &agentError{Agent: addr, Role: fmt.Sprintf("worker %d", node), Phase: "connecting",
			Err: fmt.Errorf("%w: %v (is 'loadgen agent --listen %s' running there?)", errAgentUnreachable, err, addr)}
	}
	cc := control.NewConn(conn)
	if err := control.Authenticate(cc, l.key, control.Coordinator); err != nil {
		conn.Close()
		return nil, &agentError{Agent: addr, Role: fmt.Sprintf("worker %d", node), Phase: "authenticating", Err: err}
	}
	return cc, nil
}

// roundTrip sends m on a new connection for node's agent and waits for a
// message of type want.
func (l *agentLauncher) roundTrip(ctx context.Context, node int, m control.Msg, want control.Kind) (*control.Conn, control.Msg, error) {
	cc, err := l.dial(ctx, node)
	if err != nil {
		return nil, control.Msg{}, err
	}
	fail := func(err error) (*control.Conn, control.Msg, error) {
		cc.Close()
		return nil, control.Msg{}, &agentError{Agent: l.agent(node), Role: fmt.Sprintf("worker %d", node), Phase: string(m.Kind), Err: err}
	}
	if err := cc.Send(m); err != nil {
		return fail(fmt.Errorf("%w: %v", errAgentLost, err))
	}
	r, err := cc.Recv(l.timeout)
	switch {
	case err != nil:
		return fail(fmt.Errorf("%w: %v", errAgentLost, err))
	case r.Kind == control.KindError:
		return fail(fmt.Errorf("%w: %s", errAgentFailed, r.Error))
	case r.Kind == control.KindAuth:
		return fail(fmt.Errorf("%w: the agent requires a key; give coordinate the agents' --key-file", control.ErrAuth))
	case r.Kind != want:
		return fail(control.Expect(r, want))
	}
	return cc, r, nil
}

// Launch starts node's worker on its agent (an engine.Launcher).
func (l *agentLauncher) Launch(ctx context.Context, node int, listen string) (engine.WorkerProcess, error) {
	l.mu.Lock()
	if l.launched == nil {
		l.launched = map[int]bool{}
	}
	l.launched[node] = true
	l.mu.Unlock()
	f, seed := l.faults(node)
	p := &control.WorkerPlan{Version: control.Version, Job: l.job, Node: node, Spec: l.spec, Listen: listen, Faults: f, Seed: seed, Fsync: l.fsync}
	cc, r, err := l.roundTrip(ctx, node, control.Msg{Kind: control.KindWorker, Worker: p}, control.KindStarted)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.machines[l.agent(node)] = r.Started.Machine
	l.mu.Unlock()
	out, conn := cc.Detach()
	return &remoteWorker{l: l, node: node, out: out, conn: conn}, nil
}

// dropJob has every agent that was asked to start a worker of the job
// remove the job's directory, all at once, each within l.timeout or until
// ctx ends, and returns the agents that did not, each with why. It is for
// a job that can no longer be resumed, once its workers have exited.
func (l *agentLauncher) dropJob(ctx context.Context) (failed map[string]error) {
	l.mu.Lock()
	var nodes []int
	for node := range l.launched {
		nodes = append(nodes, node)
	}
	l.mu.Unlock()
	return l.drop(ctx, l.job, nodes)
}

// drop has the agents of nodes remove the directory of job, which need
// not be l's, as dropJob does.
func (l *agentLauncher) drop(ctx context.Context, job string, nodes []int) (failed map[string]error) {
	var (
		mu sync.Mutex
		wg sync.WaitGroup
	)
	for _, node := range nodes {
		wg.Go(func() {
			p := &control.WorkerPlan{Version: control.Version, Job: job, Node: node}
			cc, _, err := l.roundTrip(ctx, node, control.Msg{Kind: control.KindDrop, Worker: p}, control.KindDropped)
			if err == nil {
				cc.Close()
				return
			}
			mu.Lock()
			if failed == nil {
				failed = map[string]error{}
			}
			failed[l.agent(node)] = err
			mu.Unlock()
		})
	}
	wg.Wait()
	return failed
}

// remoteWorker is a worker on an agent, behind one control connection that
// carries the worker's stdin and stdout past the started line.
type remoteWorker struct {
	l    *agentLauncher
	node int
	out  io.Reader
	conn net.Conn
}

// Stdin writes to the connection; closing it closes the connection's
// sending side, which the agent passes on as the end of the worker's
// stdin.
func (w *remoteWorker) Stdin() io.WriteCloser { return halfCloser{w.conn} }

// Stdout reads the connection (past the started line).
func (w *remoteWorker) Stdout() io.Reader { return w.out }

// Kill asks the agent to SIGKILL the worker.
func (w *remoteWorker) Kill() error {
	ctx, cancel := context.WithTimeout(context.Background(), w.l.timeout)
	defer cancel()
	p := &control.WorkerPlan{Version: control.Version, Job: w.l.job, Node: w.node}
	cc, _, err := w.l.roundTrip(ctx, w.node, control.Msg{Kind: control.KindKill, Worker: p}, control.KindKilled)
	if err != nil {
		return err
	}
	cc.Close()
	return nil
}

// Wait reads the connection to its end: the agent closes it once the
// worker has exited.
func (w *remoteWorker) Wait() string {
	_, _ = io.Copy(io.Discard, w.out)
	w.conn.Close()
	return fmt.Sprintf("the worker on agent %s ended", w.l.agent(w.node))
}

type halfCloser struct{ c net.Conn }

func (h halfCloser) Write(b []byte) (int, error) { return h.c.Write(b) }

func (h halfCloser) Close() error {
	if tc, ok := h.c.(*net.TCPConn); ok {
		return tc.CloseWrite()
	}
	return h.c.Close()
}
