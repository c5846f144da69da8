// Command etcd is the etcd server the tests and benchmarks run against,
// built from the Go module proxy at the version this module requires
// (scripts/install.sh builds it into .cache/etcd-<version>/etcd). It is
// etcd's own main, nothing added: a module of its own, so that the server's
// dependencies stay out of the library's go.mod.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
