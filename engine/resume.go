package engine

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sluicehq/sluice/engine/journal"
	"github.com/sluicehq/sluice/internal/durable"
)

// JournalFile is the name of the coordinator's journal in Config.Dir.
const JournalFile = "journal"

// ErrOtherJob is wrapped by [*OtherJobError].
var ErrOtherJob = errors.New("engine: the directory holds another job")

// OtherJobError means Config.Dir holds the journal of a job other than the
// one [Coordinator.Run] was given: another config, DAG, node count or
// placement. Config.StartOver discards it instead.
type OtherJobError struct {
	Path string // the journal
	What string // what differs: "config", "shape", "nodes" or "placement"
	// Journaled and Given are the two values.
	Journaled, Given string
}

func (e *OtherJobError) Error() string {
	return fmt.Sprintf("engine: %s is the journal of another job: its %s is %s, this job's is %s (start over to discard it)",
		e.Path, e.What, e.Journaled, e.Given)
}

func (e *OtherJobError) Unwrap() error { return ErrOtherJob }

// Resumed says where [Coordinator.Run] picked up a job that an earlier
// coordinator's journal holds.
type Resumed struct {
	// Checkpoint is the completed checkpoint the job resumed from: the
	// journal's last, or, when a worker could not load its copy of that
	// one, the newest every stateful task could load. With HasCheckpoint
	// false it resumed from the start of its sources' logs: none had
	// completed, or none that every task could load was left, and no
	// commit had cut the logs.
	Checkpoint    int64
	HasCheckpoint bool
	// Gen is the first generation this coordinator ran: above every
	// generation the journal holds.
	Gen uint64
	// Checkpoints and Generations are what the journal held.
	Checkpoints, Generations int
}

// shape describes the job's DAG for the journal, which resumes only a
// job of the same shape, so no two jobs have one: "name:kind*parallelism"
// for each processor, then "from->to:partitioner" for each edge,
// separated by ' '. A name ends at the first ':' or "->", so one holding
// either, or starting with '"', is written quoted (strconv.Quote), which
// reads back unambiguously; every other name is written as it is, as
// before names were ever quoted, so that the journals of such jobs still
// resume.
func (j *Job) shape() string {
	var b strings.Builder
	for i, p := range j.Procs {
		if i > 0 {
			b.WriteByte(' ')
		}
		kind := "task"
		if p.NewSource != nil {
			kind = "source"
		}
		fmt.Fprintf(&b, "%s:%s*%d", shapeName(p.Name), kind, p.Parallelism)
	}
	for _, e := range j.Edges {
		fmt.Fprintf(&b, " %s->%s:%v", shapeName(e.From), shapeName(e.To), e.Partitioner)
	}
	return b.String()
}

// shapeName is a processor's name as shape writes it.
func shapeName(name string) string {
	if strings.Contains(name, ":") || strings.Contains(name, "->") || strings.HasPrefix(name, `"`) {
		return strconv.Quote(name)
	}
	return name
}

// openJournal opens (or creates) the journal in Config.Dir and checks that
// it is this job's; a new journal starts with the job, in a directory
// emptied of anything else. It sets c.jr, c.interval and c.resumed, and
// returns the highest generation journaled.
func (c *Coordinator) openJournal() (uint64, error) {
	dir := c.cfg.Dir
	path := filepath.Join(dir, JournalFile)
	if c.cfg.StartOver {
		// Refuse to wipe what a running coordinator uses: its lock says so.
		j, err := journal.Open(path, journal.Options{NoSync: true})
		if errors.Is(err, journal.ErrLocked) {
			return 0, err
		}
		if err == nil {
			j.Close()
		}
		// The journal goes first: a start-over cut short must not leave
		// it beside half-deleted logs, which it would resume.
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return 0, err
		}
		if err := removeAll(dir); err != nil {
			return 0, err
		}
	}
	if err := durable.MkdirAll(dir, !c.cfg.NoSync); err != nil {
		return 0, err
	}
	j, err := journal.Open(path, journal.Options{NoSync: c.cfg.NoSync})
	if err != nil {
		return 0, err
	}
	ids := c.job.tasks()
	placement := c.job.Placement(c.cfg.Nodes)
	place := make([]int, len(ids))
	for i, id := range ids {
		place[i] = placement[id]
	}
	want := &journal.Job{Config: c.cfg.JobConfig, Shape: c.job.shape(), Nodes: c.cfg.Nodes, Placement: place}
	st := j.State()
	if st.Job == nil {
		// Nothing in the directory belongs to a journaled job: an
		// unjournaled first start left it, or an older engine.
		err = clearExcept(dir, JournalFile)
		if err == nil {
			err = j.Append(want)
		}
	} else {
		err = sameJob(path, st.Job, want)
	}
	if err != nil {
		j.Close()
		return 0, err
	}
	c.jr = j
	if st.HasFloor {
		c.logFloor = st.Floor
	}
	c.interval = st.Interval
	if c.interval == 0 {
		c.interval = c.cfg.InitialInterval
	}
	if st.Job != nil {
		c.resumed = &Resumed{Checkpoint: st.Checkpoint, HasCheckpoint: st.HasCheckpoint, Gen: st.Gen + 1,
			Checkpoints: st.Checkpoints, Generations: st.Generations}
		from := "the start (no checkpoint had completed)"
		if st.HasCheckpoint {
			from = fmt.Sprintf("checkpoint %d", st.Checkpoint)
		}
		c.event("resume", fmt.Sprintf("%s: from %s with generation %d", path, from, st.Gen+1))
	}
	return st.Gen, nil
}

func sameJob(path string, have, want *journal.Job) error {
	differ := func(what, a, b string) error {
		return &OtherJobError{Path: path, What: what, Journaled: a, Given: b}
	}
	switch {
	case string(have.Config) != string(want.Config):
		return differ("config", fmt.Sprintf("%q", have.Config), fmt.Sprintf("%q", want.Config))
	case have.Shape != want.Shape:
		return differ("shape", fmt.Sprintf("%q", have.Shape), fmt.Sprintf("%q", want.Shape))
	case have.Nodes != want.Nodes:
		return differ("nodes", fmt.Sprint(have.Nodes), fmt.Sprint(want.Nodes))
	case !slices.Equal(have.Placement, want.Placement):
		return differ("placement", fmt.Sprint(have.Placement), fmt.Sprint(want.Placement))
	}
	return nil
}

// clearExcept removes everything in dir but keep.
func clearExcept(dir, keep string) error {
	es, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range es {
		if e.Name() == keep {
			continue
		}
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// journalGeneration writes generation gen's record before it starts.
func (c *Coordinator) journalGeneration(gen uint64, restore int64, has bool) error {
	return c.jr.Append(&journal.Generation{Gen: gen, Restore: restore, HasRestore: has, Interval: c.interval})
}

// journalCheckpoint writes that the checkpoint at tc completed on every
// worker.
func (c *Coordinator) journalCheckpoint(gen uint64, tc int64) error {
	return c.jr.Append(&journal.Checkpoint{Gen: gen, Ts: tc, Interval: c.interval})
}

// journalCommit writes that no checkpoint before keep will be restored,
// before sources may delete the log records below it: a resumed
// coordinator knows from it how far the logs reach back.
func (c *Coordinator) journalCommit(gen uint64, keep int64) error {
	return c.jr.Append(&journal.Commit{Gen: gen, Keep: keep})
}

// checkpointsLost is the error of a recovery whose restore point (none
// without has) is older than what the source logs were cut to: it names
// the stateful tasks whose checkpoints from there on are all missing or
// corrupt.
func (c *Coordinator) checkpointsLost(ctx context.Context, stateful [][]string, restore int64, has bool) error {
	newest := "none"
	if has {
		newest = fmt.Sprint(restore)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the newest checkpoint every stateful task has is %s, the logs keep records from %d on", newest, c.logFloor)
	if st := c.jr.State(); st.HasCheckpoint {
		fmt.Fprintf(&b, " (the journal's last completed checkpoint is %d)", st.Checkpoint)
	}
	named := false
	for i, h := range c.handles {
		for _, task := range stateful[i] {
			cctx, cancel := context.WithTimeout(ctx, callTimeout)
			r, err := h.do(cctx, Request{Op: "common", Tasks: []string{task}})
			cancel()
			switch {
			case err != nil:
				fmt.Fprintf(&b, "; node %d could not list the checkpoints of %s: %v", i, task, err)
			case len(r.Common) == 0:
				fmt.Fprintf(&b, "; %s on node %d has no checkpoint (missing or corrupt)", task, i)
			case r.Common[0] < c.logFloor:
				fmt.Fprintf(&b, "; %s on node %d has none from %d on (missing or corrupt), its newest is %d",
					task, i, c.logFloor, r.Common[0])
			default:
				continue
			}
			named = true
		}
	}
	if !named {
		fmt.Fprintf(&b, "; every stateful task has a checkpoint from %d on, but not one at a timestamp they share", c.logFloor)
	}
	return fmt.Errorf("%w: %s", ErrCheckpointsLost, b.String())
}

// restorePoint is the checkpoint a generation restores: the journal's last
// completed one, when every stateful task can load it on its node;
// otherwise (a copy of it is corrupt or missing) the newest one they all
// can load, which may be later than the journal's (saved everywhere, never
// journaled) or older; none when there is no such checkpoint. Run refuses
// one the logs no longer reach back to.
func (c *Coordinator) restorePoint(ctx context.Context, stateful [][]string) (int64, bool, error) {
	st := c.jr.State()
	if !st.HasCheckpoint {
		return 0, false, nil
	}
	if stateless := !slices.ContainsFunc(stateful, func(s []string) bool { return len(s) > 0 }); stateless {
		return st.Checkpoint, true, nil
	}
	common, err := c.common(ctx, stateful)
	switch {
	case err != nil:
		return 0, false, err
	case slices.Contains(common, st.Checkpoint):
		return st.Checkpoint, true, nil
	case len(common) == 0:
		return 0, false, nil
	}
	return common[0], true, nil
}
