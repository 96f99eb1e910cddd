module github.com/sluicehq/sluice/bench/compare

go 1.26.0

replace github.com/sluicehq/sluice => ../..

require (
	github.com/HdrHistogram/hdrhistogram-go v1.4.0
	github.com/nats-io/nats-server/v2 v2.11.8
	github.com/nats-io/nats.go v1.45.0
	github.com/sluicehq/sluice v0.0.0-00010101000000-000000000000
	google.golang.org/grpc v1.75.0
)

require (
	github.com/google/go-tpm v0.9.5 // indirect
	github.com/klauspost/compress v1.20.3 // indirect
	github.com/minio/highwayhash v1.0.3 // indirect
	github.com/nats-io/jwt/v2 v2.7.4 // indirect
	github.com/nats-io/nkeys v0.4.11 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/panjf2000/ants/v2 v2.12.1 // indirect
	github.com/panjf2000/gnet/v2 v2.10.0 // indirect
	github.com/valyala/bytebufferpool v1.0.0 // indirect
	go.uber.org/multierr v1.11.0 // indirect
	go.uber.org/zap v1.28.0 // indirect
	golang.org/x/crypto v0.41.0 // indirect
	golang.org/x/net v0.42.0 // indirect
	golang.org/x/sync v0.24.0 // indirect
	golang.org/x/sys v0.35.0 // indirect
	golang.org/x/text v0.28.0 // indirect
	golang.org/x/time v0.12.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20250707201910-8d1bb00bc6a7 // indirect
	google.golang.org/protobuf v1.36.6 // indirect
	gopkg.in/natefinch/lumberjack.v2 v2.2.1 // indirect
)
