// ozone-scm-pause holds a Pod's namespaces open for the node test tier: the container runtime starts it first in
// every Pod sandbox, and the Pod's containers join its network (and IPC, and with shareProcessNamespace PID)
// namespace. It does nothing else: it exits 0 on SIGINT or SIGTERM, and, being PID 1 of a shared PID namespace,
// reaps every child that exits so that no zombie is left behind. Built static (CGO_ENABLED=0) into a scratch image.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

const version = "ozone-scm-pause 1.0"

func main() {
	if len(os.Args) > 1 {
		if os.Args[1] == "-v" || os.Args[1] == "--version" {
			fmt.Println(version)
			return
		}
		fmt.Fprintf(os.Stderr, "ozone-scm-pause: unexpected argument %q (it takes none; -v prints the version)\n", os.Args[1])
		os.Exit(2)
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig == syscall.SIGCHLD {
			reap()
			continue
		}
		os.Exit(0)
	}
}

// reap collects every child that has exited; SIGCHLD signals coalesce, so one signal may stand for several.
func reap() {
	for {
		var status syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &status, syscall.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}
