// Package engine is Sluice's minimal task engine: it runs a small DAG of
// tasks over the transport and makes the whole pipeline exactly-once under
// link faults, task crashes and killed processes.
//
// # Pieces
//
// A [Job] is a DAG of processors, each with a parallelism; an [Edge] says
// how a processor's output is spread over the next one's tasks (a
// [Partitioner]: hash of the key, round robin, broadcast). A processor is
// either a [Source], which reads records, or a [Task], which processes runs
// of [Message]s and emits new ones through an [Emitter]. A task that keeps
// state implements [Stateful]; a task or source that has a result at the
// end of input implements [Finisher]. Every call works on a run of messages
// (a slice), never one call per message.
//
// A [Worker] hosts the tasks placed on one node (one OS process, one
// transport.Node). With several nodes, data between tasks always travels
// over transport channels, (source task, target task, generation) as
// channel epoch, even between two tasks of one node. When the whole job
// runs on one node without injected transport faults, edges are chained
// instead, like Flink's operator chaining: a task's output runs are handed
// to the target task's handler by a direct call on the sending goroutine,
// which is cheaper on a few cores than a transport hop; the call returning
// is the acknowledgement. The [Coordinator] drives the workers: in
// this process, or over a JSON-lines control plane ([ServeWorker]) on the
// stdin and stdout of child processes ([ProcessSpawner]) or of workers a
// [Launcher] starts elsewhere (loadgen's agents run them on other hosts).
//
// # Exactly-once
//
// Sources give their records strictly increasing timestamps (for example the
// record's position in the input) and can be positioned at a timestamp
// ([Source.Start]). Each source task appends every run it reads to its
// engine/store log before emitting it. Every task reports its minimum clock
// to its worker: the least timestamp among its unacknowledged output (the
// transport acknowledges a message only after the target's handler
// returned) and, for a source, the next record it may read. A task's state
// is not in its clock: a task emits what a run causes while it processes
// that run, with the run's timestamps, and keeps nothing in its state to
// emit later (a sink's result comes out of its final state at the end,
// through [Finisher]). A task reports before its handler returns, so its
// successor's report always covers what it hands on before its
// predecessor's report lets go of it.
// The coordinator polls the workers in rounds and keeps the global minimum
// with engine/clock; with several processes it takes the least of the last
// depth+1 complete rounds, because a message can slip between two nodes'
// replies of one round only once per edge it crosses.
//
// Checkpoints are clock based, after Gearpump: a stateful task keeps a
// checkpoint copy of its state holding exactly the messages with timestamp
// < Tc beside its current state. The copy is made lazily: while no message
// at or beyond Tc has reached the task, its current state is the
// checkpoint state; the first run that reaches Tc copies the state over
// (Snapshot, Restore) before it is processed, and only from then on do
// messages below Tc go through the copy too. Sources may only read below a horizon, the
// next checkpoint time after Tc. When the global minimum reaches Tc, every
// stateful task persists its checkpoint copy (engine/checkpoint), sources
// fsync their logs, and, since no message at or beyond the horizon exists
// yet, the checkpoint copy becomes a copy of the current state for the next
// Tc; then the coordinator raises the horizon and sources delete log
// segments, and stateful tasks' checkpoints, older than the oldest
// checkpoint recovery may still choose (the last two completed, so that a
// corrupt newest file leaves an older one the logs can replay from; a
// checkpoint saved on some nodes only, which never completed, deletes
// neither). The interval, in timestamp units, adapts
// so that checkpoints come about every [Config.CheckpointEvery] of wall
// time, or a quarter of the time between failures when they come more
// often. Sources are not checkpointed: a source's position is its state,
// and it restarts at the record after the last one in its log.
//
// A task that panics or returns an error freezes the global clock and is
// reported to the coordinator, which recovers the simplest correct way: it
// stops every task, restores every stateful task from the newest common
// checkpoint, restarts all tasks with a new generation (the channels' new
// epoch fences off whatever the old one still sends), and the sources
// replay their logs from the checkpoint's timestamp; restored tasks drop
// with a timestamp filter what the checkpoint already holds. Each failure
// is counted once and recovered once: a node's death that is noticed by a
// failed control call and again by its exit event, or after the node was
// restarted, is one failure. After a recovery the first checkpoint comes
// at a small fraction of the interval and the interval doubles from there;
// a generation that fails before its first checkpoint makes the next one's
// first step a quarter of its own. So the job moves forward as long as
// failures are further apart than a recovery plus one small checkpoint,
// however far off the first or the learned interval is. A [RestartPolicy] bounds how often
// recovery may happen; beyond it, when no checkpoint the logs can replay
// from is left ([ErrCheckpointsLost]), or when a worker could not make a
// source log durable, so that a replay could miss records
// ([ErrSourceLogLost]; the log records the failure on disk, so a worker
// that replaces one that died knows it too), or when a processor's
// constructor returned neither a task nor an error ([ErrInvalidJob]), the
// run ends with an error.
// Sinks produce their output from their final state at the end of input
// ([Finisher]), so replay never writes anything twice. Link faults are not failures: the transport
// re-sends lost messages and drops duplicates on its own.
//
// # A coordinator that recovers
//
// The coordinator keeps its decisions in an append-only journal in
// Config.Dir (engine/journal), each record fsynced before it acts on it:
// the job (Config.JobConfig, the DAG's shape, the number of nodes, the
// placement of tasks on them), each generation before its channels open
// with its number as their epoch, each checkpoint once every worker has
// persisted it, and each commit (the oldest checkpoint recovery may still
// choose) before sources may delete the log segments below it. A
// coordinator started on a directory whose journal holds the same job
// resumes it: it restores the journal's last completed checkpoint (the
// workers' logs and checkpoints are in the same directory tree) with a
// generation above every journaled one, so whatever a worker of the dead
// coordinator still sends carries a stale epoch and is fenced off. When the
// workers hold no common checkpoint the logs still reach back to (their
// files went missing or corrupt while it was down), it ends with
// [ErrCheckpointsLost] before it journals or starts a generation, which
// would discard the checkpoints that are left. A journal of another job is
// refused ([OtherJobError]) unless Config.StartOver discards the directory.
// Workers lock their directories, so a new worker waits until the dead
// coordinator's worker processes, which end when their control pipe
// closes, are gone.
//
// That is what is highly available, and all of it: one coordinator that
// can be killed at any instant and started again, by an operator or a
// supervisor, without losing or repeating anything. While it is down the
// job stands still; nothing elects a replacement; the journal, logs and
// checkpoints live on one host's disk and are not replicated, so losing
// that disk loses the job. There is no quorum and no standby.
package engine
