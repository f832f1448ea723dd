// Package broker sets up a clusterset the way `subctl deploy-broker` and
// `subctl join` do: Deploy prepares the broker cluster (its namespace, the
// CRDs, a ServiceAccount whose token the members use, the Globalnet
// bookkeeping) and describes it in a broker-info.subm file; Join registers a
// member cluster with the broker, using only what that file grants, and
// installs into the member what its agent needs (the CRDs, least-privilege
// ServiceAccounts and the agent's configuration, api.AgentConfig); DeployMember
// runs Snorkel there (the agent DaemonSet and dnsd, from the manifests in
// package deploy, and CoreDNS's forward of clusterset.local to dnsd); Leave
// undoes a member's registration, and Uninstall all that join and
// DeployMember did; RecoverInfo rebuilds broker-info.subm from a joined
// cluster or the broker.
//
// broker-info.subm, the Globalnet ConfigMap and the Cluster objects keep
// Submariner's formats, so that a file subctl wrote can be joined with and a
// broker Snorkel deployed can be read by Submariner's tools.
//
// Every function talks to the API servers synchronously and keeps no state
// between calls; concurrent Joins against one broker are safe (the Globalnet
// allocation is recorded with optimistic concurrency).
package broker
