package engine_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluicehq/sluice/engine"
)

// unreachable is the only transport address a fuzzed start request may
// name: nothing listens on port 1, so a dial fails at once and the fuzzer
// never reaches beyond the machine.
const unreachable = "127.0.0.1:1"

// FuzzServeWorker feeds a worker's control plane arbitrary lines, as a
// coordinator (or a connection an agent copies to the worker) sends them;
// the addresses of start requests are replaced by an unreachable one.
// Whatever the lines: no panic; ServeWorker returns, with an error about
// the control line exactly when a line is not a request; it says hello
// first; and every request read before that line (or an exit) is answered
// once, with its ID, in well-formed JSON.
func FuzzServeWorker(f *testing.F) {
	for _, s := range []string{
		`{"id":1,"op":"clock","gen":1}`,
		`{"id":1,"op":"start","start":{"gen":1,"node":0,"addrs":["x"],"placement":[0,0]}}` + "\n" + `{"id":2,"op":"run","gen":1}` + "\n" + `{"id":3,"op":"clock","gen":1}` + "\n" + `{"id":4,"op":"stop"}`,
		`{"id":1,"op":"start","start":{"gen":1,"node":0,"addrs":["x"],"placement":[0,5]}}` + "\n" + `{"id":2,"op":"clock","gen":1}`,
		`{"id":1,"op":"start","start":{"gen":2,"node":1,"addrs":["x","y"],"placement":[1,0],"restore":5,"has_restore":true,"target":10,"horizon":20}}` + "\n" + `{"id":2,"op":"checkpoint","gen":2,"persist":true,"ts":10,"next":11}`,
		`{"id":1,"op":"latest","tasks":["0.0","1.0","../x",""]}` + "\n" + `{"id":2,"op":"common","tasks":["0.0"]}`,
		`{"id":1,"op":"crash","gen":1,"task":"1.0"}` + "\n" + `{"id":2,"op":"horizon","gen":1,"ts":3}` + "\n" + `{"id":3,"op":"commit","gen":1,"ts":3}`,
		`{"id":1,"op":"finish","gen":1}` + "\n" + `{"id":2,"op":"exit"}` + "\n" + `{"id":3,"op":"clock"}`,
		`{"id":1,"op":"nonsense"}` + "\n" + `{"id":2,"op":`,
		"\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		watchdog := time.AfterFunc(time.Minute, func() {
			buf := make([]byte, 4<<20)
			panic(fmt.Sprintf("FuzzServeWorker: over a minute on %q\n%s", in, buf[:runtime.Stack(buf, true)]))
		})
		defer watchdog.Stop()

		// What ServeWorker will read: the lines as its scanner splits
		// them, start addresses replaced.
		var lines [][]byte
		var want []uint64 // the IDs it must answer
		wantErr := false
		sc := bufio.NewScanner(bytes.NewReader(in))
		for sc.Scan() {
			var req engine.Request
			if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
				lines = append(lines, bytes.Clone(sc.Bytes()))
				wantErr = true
				break
			}
			line := bytes.Clone(sc.Bytes())
			if req.Op == "start" && req.Start != nil {
				for i := range req.Start.Addrs {
					req.Start.Addrs[i] = unreachable
				}
				var err error
				if line, err = json.Marshal(req); err != nil {
					t.Fatal(err)
				}
			}
			lines = append(lines, line)
			want = append(want, req.ID)
			if req.Op == "exit" {
				break
			}
		}
		var feed []byte
		for _, l := range lines {
			feed = append(append(feed, l...), '\n')
		}

		w, err := engine.NewWorker(srcSinkJob(make(chan string, 1<<10)), engine.WorkerConfig{Dir: t.TempDir(), NoSync: true, Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		addr := w.Addr()
		var out syncBuffer
		err = engine.ServeWorker(context.Background(), w, bytes.NewReader(feed), &out)
		if wantErr != (err != nil) || err != nil && !strings.Contains(err.Error(), "engine: control line") {
			t.Fatalf("ServeWorker returned %v; a line that is not a request: %v", err, wantErr)
		}
		var got []uint64
		for i, l := range strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n") {
			var r engine.Response
			if err := json.Unmarshal([]byte(l), &r); err != nil {
				t.Fatalf("output line %q: %v", l, err)
			}
			switch {
			case i == 0:
				if r.Addr != addr {
					t.Fatalf("the first line %q is not the hello naming %s", l, addr)
				}
			case r.Event == nil:
				got = append(got, r.ID)
			}
		}
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("answered %v, want %v; fed\n%s\ngot\n%s", got, want, feed, out.String())
		}
	})
}
