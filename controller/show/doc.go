// Package show is `snorkel show connections|endpoints|gateways|networks|
// brokers|versions|all`: it reads what Snorkel keeps in each cluster of a
// kubeconfig (the agent configuration `snorkel join` stored, the Gateway
// objects the agents keep current, the broker's Globalnet ConfigMap) and
// prints it as subctl's `show` commands do, with their columns, their
// per-cluster header and their ✓/⚠/✗ status lines.
//
// Each view gathers from one cluster into a table or a block of details;
// Run walks the selected kubeconfig contexts one after the other and
// prints every view of each from the calling goroutine. Nothing is cached
// between calls and nothing is written to any cluster.
package show
