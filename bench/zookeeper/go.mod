module github.com/distlock/locker/bench/zookeeper

go 1.26.0

require (
	github.com/distlock/locker v0.0.0
	github.com/go-zookeeper/zk v1.0.4
)

replace github.com/distlock/locker => ../..
