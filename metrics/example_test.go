package metrics_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/sluicehq/sluice/metrics"
	"github.com/sluicehq/sluice/transport"
)

// A node's counters at /metrics, as README.md's "Watching a running node"
// mounts them; an engine's *engine.Coordinator would be one more
// collector in the same call.
func ExampleHandler() {
	node, err := transport.NewNode()
	if err != nil {
		fmt.Println(err)
		return
	}
	defer node.Close(context.Background())
	mux := http.NewServeMux()
	mux.Handle("/metrics", metrics.Handler(
		metrics.NodeCollector(node, metrics.NodeOptions{}), // Channels: true adds a series per channel
	))

	rec := httptest.NewRecorder()
	mux.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	fmt.Println(rec.Header().Get("Content-Type"))
	for _, line := range strings.Split(rec.Body.String(), "\n") {
		if strings.HasPrefix(line, "# TYPE sluice_messages_sent_total") {
			fmt.Println(line)
		}
	}
	// Output:
	// text/plain; version=0.0.4; charset=utf-8
	// # TYPE sluice_messages_sent_total counter
}
