package main

import (
	"os"

	"github.com/snorkel-net/snorkel/controller/broker"
)

func init() {
	commands["deploy-broker"] = command{
		run:   func(args []string) error { return broker.RunDeployBroker(args, os.Stdout) },
		usage: broker.DeployBrokerUsage,
	}
	commands["join"] = command{
		run:   func(args []string) error { return broker.RunJoin(args, os.Stdout) },
		usage: broker.JoinUsage,
	}
}
