// Package globalnet is Globalnet's address management on the Kubernetes
// API, wire-compatible with Submariner's Globalnet controller: it allocates
// global IPs from the cluster's global CIDR to the ClusterGlobalEgressIP,
// to GlobalEgressIPs and to the GlobalIngressIPs it creates for exported
// services and for the pods of exported headless services, records them in
// the objects' status, and turns the result into natengine.Rules for the
// gateway.
//
// An IPAM runs (Run) only on the cluster's active gateway. All allocation
// happens on one worker goroutine; the informers' handlers only queue keys.
// Every allocation is kept in its object's status, so a restarted or
// failed-over IPAM reads them back and keeps every address. The lookups
// (ServiceGlobalIP, PodGlobalIP) and SetRemotes are safe for concurrent use;
// the callbacks of Config run on the worker and must not block for long.
package globalnet
