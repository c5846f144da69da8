module github.com/distlock/locker/bench/zookeeper

go 1.26.0

require (
	github.com/distlock/locker v0.0.0
	github.com/go-zookeeper/zk v1.0.4
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.opentelemetry.io/otel v1.47.0 // indirect
	go.opentelemetry.io/otel/metric v1.47.0 // indirect
	go.opentelemetry.io/otel/trace v1.47.0 // indirect
)

replace github.com/distlock/locker => ../..
