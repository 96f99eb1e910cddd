package main

import (
	"context"
	"io"
	"log/slog"
	"os"

	"github.com/sluicehq/sluice/bench/jobs"
	"github.com/sluicehq/sluice/engine"
	"github.com/sluicehq/sluice/transport"
)

// nodeCmd is a worker process of a multi-process engine run: `loadgen run
// --nodes N` starts N of them and drives them with JSON lines on stdin and
// stdout. For tests, SLUICE_KILL_AT=point:n in its environment makes it
// SIGKILL itself at a named point of its work (engine.WorkerConfig.KillAt).
func nodeCmd(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	fs := newFlagSet("node", "Runs engine tasks for a 'loadgen run --nodes N' parent (internal).", stderr)
	spec := fs.String("spec", "", "the job, as JSON")
	dir := fs.String("dir", "", "directory for this node's logs and checkpoints")
	listen := fs.String("listen", "127.0.0.1:0", "transport address")
	faults := fs.String("faults", "", "transport faults to inject")
	seed := fs.Uint64("seed", 1, "fault seed")
	sync := fs.Bool("fsync", true, "fsync logs and checkpoints")
	var sec nodeFlags
	sec.register(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	opts, err := sec.options()
	if err != nil {
		return err
	}
	f, _, err := transport.ParseFaults(*faults, *seed)
	if err != nil {
		return err
	}
	job, err := jobs.BuildJSON([]byte(*spec), nil)
	if err != nil {
		return err
	}
	w, err := engine.NewWorker(job, engine.WorkerConfig{Dir: *dir, Listen: *listen, Faults: f, NoSync: !*sync,
		Logger:    slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Transport: opts, KillAt: os.Getenv("SLUICE_KILL_AT")})
	if err != nil {
		return err
	}
	return engine.ServeWorker(ctx, w, stdin, stdout)
}
