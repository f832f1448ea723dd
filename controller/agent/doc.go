// Package agent is the core of a member cluster's gateway agent, the job
// Submariner's gateway engine does on the Kubernetes side.
//
// Every gateway node of a cluster runs an Agent. They elect one active
// gateway per cluster through a Lease in the agent namespace; the others
// stay passive, with their watches of the broker warm, and take over when
// the active one stops or dies. Each keeps a Gateway object, named after
// its node, whose status says active or passive and, on the active one,
// the connection to every remote cluster.
//
// The active gateway publishes the cluster's Endpoint (exactly one per
// cluster) on the broker and in the agent namespace, and the cluster's
// Cluster object on the broker. From the broker's Endpoints and Clusters it
// builds the gateway configuration, one gateway.Remote per other cluster
// with the same cable driver, and hands it to the Dataplane whenever it
// changes. Work that must run on the active gateway only runs under the
// leadership's context: Globalnet's IPAM when the cluster has a global CIDR
// (its rules become the configuration's Globalnet addresses; the data plane
// gets no configuration before the IPAM's first rules), the service sync
// when the broker offers service discovery (fed the IPAM's global IPs), NAT
// discovery unless NAT traversal is off (it picks each remote's private or
// public address and learns this gateway's public IP), and
// Config.OnActive.
//
// Concurrency: informer handlers only signal; one goroutine per role does
// the work (the leader's reconcile loop, the status writer), so the
// Dataplane's Apply is never called concurrently. Status may be called
// from the status writer at any time.
package agent
