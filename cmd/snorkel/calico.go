package main

import (
	"os"

	"github.com/snorkel-net/snorkel/deploy/calico"
)

func init() {
	commands["calico"] = command{
		run:   func(args []string) error { return calico.Run(args, os.Stdout) },
		usage: calico.Usage,
	}
}
