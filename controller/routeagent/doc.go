// Package routeagent is Snorkel's route agent, Submariner's route agent for
// a userspace data plane: `snorkel route-agent`, run on every node of a
// member cluster, gateway nodes included, carries the traffic of the pods
// of every node to the cluster's active gateway, past the CNI's
// masquerade.
//
// Why: the active gateway routes the remote clusters' CIDRs into its TUN
// device on its own node only. A pod on another node has no route to a
// remote cluster, and what it sends off the pod network the CNI
// masquerades to the node's address, which the far gateway drops, since
// that source is not among the sending cluster's CIDRs.
//
// What it does, from the Gateways (submariner.io/v1) and the gateways'
// Lease (snorkel-gateway) in the agent's namespace:
//
//   - The active gateway is the Lease's holder, from the moment it holds
//     the Lease; without a holder, the Gateway with status.haStatus active
//     (if several claim it, the one whose status was written last). The
//     remote CIDRs are the subnets of its status.connections, and while a
//     new holder has not written its status, every remote CIDR known. IPv4
//     only.
//   - On a node other than the active gateway's, each remote CIDR is
//     routed via the gateway's status.localEndpoint.private_ip (`ip route
//     replace CIDR via IP proto 84 metric 1024`). The kernel takes such a
//     route only when that address is on a subnet the node is directly on:
//     the gateway node must share an L2 subnet with the other nodes. Until
//     it takes it, the CIDR is unreachable from the node, and the error
//     says so once.
//   - On the active gateway's node there are none of these routes: the
//     gateway's routes into its TUN device serve. There the route agent
//     warns if net.ipv4.ip_forward is 0, which would stop the other nodes'
//     traffic.
//   - With no active gateway, each remote CIDR it knows of is
//     unreachable (proto 84), so that pod traffic for a remote cluster is
//     refused at once rather than leave by the default route in cleartext.
//   - On every node, the nftables table ip snorkel-routeagent exempts
//     traffic to the remote CIDRs from the CNI's masquerade with an
//     identity source NAT just before srcnat (see TableName).
//
// The routes carry their own rtnetlink protocol (RouteProtocol), so the
// route agent finds its routes after a restart and prunes those no longer
// wanted without keeping state. It leaves its routes and table in place
// when it stops, so pods keep working through a rolling update; Uninstall
// (`snorkel route-agent --uninstall`) removes them.
//
// Concurrency: informer events only mark the Gateways dirty; one
// goroutine (Run's) reads the informer's cache and sets the node, on each
// change and every Config.Resync, which puts back what was removed by
// hand. The node's routing table and nftables are reached through netlink
// handles bound to its network namespace, so no goroutine changes
// namespace but for reading the forwarding sysctl.
package routeagent
