package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/snorkel-net/snorkel/lab"
)

// runLabPod is `snorkel lab-pod`, the programs the lab runs inside its pod
// namespaces. It is not meant to be run by hand.
func runLabPod(args []string) error {
	if len(args) == 0 || args[0] != "whereami" {
		return errors.New("usage: snorkel lab-pod whereami --name POD --cluster ID [--listen ADDR]")
	}
	fs := flag.NewFlagSet("lab-pod whereami", flag.ContinueOnError)
	name := fs.String("name", "", "pod name to report")
	cluster := fs.String("cluster", "", "cluster ID to report")
	listen := fs.String("listen", ":80", "address to serve HTTP on")
	if err := fs.Parse(args[1:]); err != nil {
		return err
	}
	if *name == "" || *cluster == "" {
		return errors.New("whereami: --name and --cluster are required")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("whereami: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return lab.Whereami{Pod: *name, Cluster: *cluster}.Serve(ctx, ln)
}
