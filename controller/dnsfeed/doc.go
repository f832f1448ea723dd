// Package dnsfeed feeds dnsd from a member cluster, as Lighthouse's DNS
// server reads its cluster: it watches the cluster's own API server (never
// the broker) for what controller/servicesync imports there, and for the
// connection status the gateways report, and turns them into dnsd's store.
//
// What it reads:
//
//   - ServiceImports without the source-cluster label: the merged import
//     of a service (its type, ports, and clusterset IPs in spec.ips when an
//     implementation allocates them).
//   - EndpointSlices labelled
//     endpointslice.kubernetes.io/managed-by=lighthouse-agent.submariner.io
//     in the namespace their lighthouse.submariner.io/sourceNamespace label
//     names: per exporting cluster (multicluster.kubernetes.io/source-cluster)
//     a ClusterSetIP service's address and readiness, or a headless
//     service's pods with hostnames, readiness and the
//     publish-not-ready-addresses annotation.
//   - Gateways (submariner.io/v1) in the agent's namespace: the active
//     gateway's connections whose status is "connected" are the connected
//     clusters; the local cluster always is.
//   - Under Globalnet, the cluster's own EndpointSlices
//     (kubernetes.io/service-name): the local cluster's headless pods are
//     answered with their pod IPs, since their global IPs are not routed
//     inside their own cluster (Lighthouse does the same).
//
// A service exists in DNS once its ServiceImport does. Concurrency:
// informer events only mark the services or the connectivity dirty; one
// goroutine rebuilds what is dirty from the informer caches, at most every
// Config.MinInterval, so that a burst of changes is one rebuild.
package dnsfeed
