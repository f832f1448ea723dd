// Command pause is the process of the lab's pod sandbox image: it holds
// the pod's namespaces until containerd stops the sandbox with SIGTERM
// (or SIGINT), then exits 0. Build it static:
//
//	CGO_ENABLED=0 go build -o OUT ./deploy/imagetar/pause
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
}
