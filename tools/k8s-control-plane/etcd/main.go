// etcd for the control-plane test tier: the etcd server's own entry point, built at the version
// k8s.io/kubernetes v1.35.4 is tested with (go.mod).
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
