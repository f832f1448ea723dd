// Package diagnose is `snorkel diagnose`: it reads a member cluster's
// objects and says, check by check, what is misconfigured and how to fix
// it, with subctl's diagnose status lines (" ✓ …", " ⚠ …", " ✗ …: fix").
//
// Every check reads the API server only: the Kubernetes version, the
// agent's deployment, the Gateway objects' connections, the CNI and
// kube-proxy configuration, Globalnet's allocations, and service
// discovery's DNS forward and imports. Probes that need a node's network
// (firewall, MTU) are left to the gateways; the firewall check reports
// what their health checks saw, and skips a cluster whose gateway pods do
// not run.
//
// Run walks the targets one after the other from the calling goroutine;
// nothing is written to any cluster and nothing is cached between calls.
package diagnose
