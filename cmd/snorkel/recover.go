package main

import (
	"flag"
	"io"

	"github.com/snorkel-net/snorkel/controller/broker"
)

const recoverBrokerInfoUsage = "rebuild broker-info.subm from a joined cluster or the broker: snorkel recover-broker-info [--kubeconfig F] [--context C] [--broker-url URL] [--out broker-info.subm]"

// runRecoverBrokerInfo parses args into a broker.RecoverCommand and runs
// it.
func runRecoverBrokerInfo(args []string, out io.Writer) error {
	fs := flag.NewFlagSet("recover-broker-info", flag.ContinueOnError)
	var c broker.RecoverCommand
	fs.StringVar(&c.Kubeconfig, "kubeconfig", "", "kubeconfig file of a joined cluster or of the broker (default $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&c.Context, "context", "", "kubeconfig context of a joined cluster or of the broker (default the current context)")
	fs.StringVar(&c.BrokerURL, "broker-url", "", "broker API server URL to record in the file (default the one the cluster knows)")
	fs.StringVar(&c.Out, "out", broker.InfoFileName, "where to write the broker information file; one already there is kept with the time appended")
	if err := parseFlags(fs, args, nil, out); err != nil {
		return err
	}
	return broker.RunRecoverBrokerInfo(c, out)
}
