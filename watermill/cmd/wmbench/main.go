// Command wmbench measures Pub/Subs through the same Watermill API, in one
// run, on one machine: this module's Sluice Pub/Sub (two nodes over
// loopback TCP), Watermill's GoChannel (in process, no network) and core
// NATS (watermill-nats v2 with JetStream disabled, through a nats-server
// embedded in this process, over loopback TCP).
//
// For each Pub/Sub and message size it measures
//
//   - throughput: one goroutine publishes -n messages, one message per
//     Publish call, to one subscription that acks each as it arrives; the
//     time runs from the first Publish to the last message received;
//   - latency: -lat messages one at a time (the next is published when the
//     previous has arrived), from Publish to arrival on the subscription's
//     channel, percentiles of the samples.
//
// go run ./cmd/wmbench -n 50000 -lat 5000 -sizes 100,1024
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	wm "github.com/ThreeDotsLabs/watermill"
	wmnats "github.com/ThreeDotsLabs/watermill-nats/v2/pkg/nats"
	"github.com/ThreeDotsLabs/watermill/message"
	"github.com/ThreeDotsLabs/watermill/pubsub/gochannel"
	"github.com/nats-io/nats-server/v2/server"

	"github.com/sluicehq/sluice/watermill"
)

type pubSub struct {
	name  string
	about string
	start func() (message.Publisher, message.Subscriber, func(), error)
}

func main() {
	n := flag.Int("n", 50_000, "messages per throughput run")
	lat := flag.Int("lat", 5_000, "messages per latency run")
	sizesFlag := flag.String("sizes", "100,1024", "payload sizes in bytes, comma-separated")
	only := flag.String("only", "", "run only these Pub/Subs (comma-separated: sluice, gochannel, nats)")
	flag.Parse()
	var sizes []int
	for _, s := range strings.Split(*sizesFlag, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || v < 8 {
			log.Fatalf("bad size %q: want an integer of at least 8", s)
		}
		sizes = append(sizes, v)
	}
	fmt.Printf("wmbench: %s, %s/%s, GOMAXPROCS %d, -n %d -lat %d\n", cpuModel(), runtime.GOOS, runtime.GOARCH, runtime.GOMAXPROCS(0), *n, *lat)
	fmt.Printf("%-10s %6s %12s %10s %10s %10s %10s %s\n", "pubsub", "size", "msgs/s", "MB/s", "p50", "p99", "p99.9", "received")
	for _, ps := range pubSubs() {
		if *only != "" && !slices.Contains(strings.Split(*only, ","), ps.name) {
			continue
		}
		for _, size := range sizes {
			rate, got, err := throughput(ps, size, *n)
			if err != nil {
				log.Fatalf("%s %d B throughput: %v", ps.name, size, err)
			}
			p, err := latency(ps, size, *lat)
			if err != nil {
				log.Fatalf("%s %d B latency: %v", ps.name, size, err)
			}
			fmt.Printf("%-10s %6d %12.0f %10.1f %10s %10s %10s %d/%d\n", ps.name, size, rate, rate*float64(size)/1e6,
				p[0], p[1], p[2], got, *n)
		}
	}
	fmt.Println()
	for _, ps := range pubSubs() {
		fmt.Printf("%s: %s\n", ps.name, ps.about)
	}
}

func pubSubs() []pubSub {
	logger := wm.NopLogger{}
	return []pubSub{
		{"sluice", "this module: a Publisher and a Subscriber, each with a Sluice node, over loopback TCP (gnet), a MemDirectory, default options",
			func() (message.Publisher, message.Subscriber, func(), error) {
				dir := watermill.NewMemDirectory()
				pub, err := watermill.NewPublisher(dir)
				if err != nil {
					return nil, nil, nil, err
				}
				sub, err := watermill.NewSubscriber(dir)
				if err != nil {
					return nil, nil, nil, err
				}
				return pub, sub, func() {}, nil
			}},
		{"gochannel", "Watermill's GoChannel, in process (no network, no encoding), default config",
			func() (message.Publisher, message.Subscriber, func(), error) {
				g := gochannel.NewGoChannel(gochannel.Config{}, logger)
				return g, g, func() {}, nil
			}},
		{"nats", "watermill-nats v2.1.3, core NATS (JetStream disabled), NATSMarshaler, through nats-server v2.11.8 embedded in this process, over loopback TCP",
			func() (message.Publisher, message.Subscriber, func(), error) {
				srv, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true})
				if err != nil {
					return nil, nil, nil, err
				}
				go srv.Start()
				if !srv.ReadyForConnections(5 * time.Second) {
					return nil, nil, nil, errors.New("nats-server did not start")
				}
				js := wmnats.JetStreamConfig{Disabled: true}
				pub, err := wmnats.NewPublisher(wmnats.PublisherConfig{URL: srv.ClientURL(), JetStream: js}, logger)
				if err != nil {
					return nil, nil, nil, err
				}
				sub, err := wmnats.NewSubscriber(wmnats.SubscriberConfig{
					URL: srv.ClientURL(), JetStream: js, Unmarshaler: &wmnats.NATSMarshaler{},
					SubscribersCount: 1, CloseTimeout: time.Second, AckWaitTimeout: 30 * time.Second,
				}, logger)
				if err != nil {
					return nil, nil, nil, err
				}
				return pub, sub, srv.Shutdown, nil
			}},
	}
}

// throughput returns the messages per second received and how many arrived.
func throughput(ps pubSub, size, n int) (float64, int, error) {
	pub, sub, stop, err := ps.start()
	if err != nil {
		return 0, 0, err
	}
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := sub.Subscribe(ctx, "bench")
	if err != nil {
		return 0, 0, err
	}
	time.Sleep(100 * time.Millisecond) // the subscription reaches the server (NATS)
	payload := make([]byte, size)
	start := time.Now()
	errc := make(chan error, 1)
	go func() {
		for range n {
			if err := pub.Publish("bench", message.NewMessage(wm.NewUUID(), payload)); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	got := 0
	idle := time.NewTimer(10 * time.Second)
loop:
	for got < n {
		select {
		case m := <-msgs:
			m.Ack()
			got++
			idle.Reset(10 * time.Second)
		case <-idle.C:
			break loop // messages lost (core NATS drops for slow consumers)
		}
	}
	elapsed := time.Since(start)
	if err := <-errc; err != nil {
		return 0, got, err
	}
	cancel()
	_ = pub.Close()
	_ = sub.Close()
	return float64(got) / elapsed.Seconds(), got, nil
}

// latency returns the 50th, 99th and 99.9th percentiles.
func latency(ps pubSub, size, n int) ([3]time.Duration, error) {
	var p [3]time.Duration
	pub, sub, stop, err := ps.start()
	if err != nil {
		return p, err
	}
	defer stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	msgs, err := sub.Subscribe(ctx, "bench")
	if err != nil {
		return p, err
	}
	time.Sleep(100 * time.Millisecond)
	payload := make([]byte, size)
	samples := make([]time.Duration, 0, n)
	for range n {
		binary.LittleEndian.PutUint64(payload, uint64(time.Now().UnixNano()))
		if err := pub.Publish("bench", message.NewMessage(wm.NewUUID(), payload)); err != nil {
			return p, err
		}
		select {
		case m := <-msgs:
			samples = append(samples, time.Duration(time.Now().UnixNano()-int64(binary.LittleEndian.Uint64(m.Payload))))
			m.Ack()
		case <-time.After(10 * time.Second):
			return p, fmt.Errorf("message %d did not arrive", len(samples))
		}
	}
	cancel()
	_ = pub.Close()
	_ = sub.Close()
	slices.Sort(samples)
	for i, q := range []float64{0.50, 0.99, 0.999} {
		p[i] = samples[min(len(samples)-1, int(q*float64(len(samples))))].Round(100 * time.Nanosecond)
	}
	return p, nil
}

func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for _, line := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}
