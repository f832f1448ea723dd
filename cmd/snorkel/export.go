package main

import (
	"os"

	"github.com/snorkel-net/snorkel/controller/servicesync"
)

func init() {
	commands["export"] = command{
		run:   func(args []string) error { return servicesync.RunExport(args, os.Stdout) },
		usage: servicesync.ExportUsage,
	}
	commands["unexport"] = command{
		run:   func(args []string) error { return servicesync.RunUnexport(args, os.Stdout) },
		usage: servicesync.UnexportUsage,
	}
}
