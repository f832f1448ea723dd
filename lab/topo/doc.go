// Package topo builds network topologies out of Linux network namespaces for
// the lab, the netns end-to-end tests and the perf harness: namespaces named
// with a prefix (so that several users can run side by side), veth pairs and
// bridges wired with netlink, addresses, routes, sysctls, nftables rulesets,
// commands and long-lived processes run inside a namespace, and sockets
// dialled or listened on inside a namespace from Go.
//
// Nothing is created in the caller's own namespace: veth pairs are created
// directly between two topology namespaces, so deleting the namespaces removes
// every device. A Topology records what it creates (optionally in a state file,
// so that another process can tear it down after a crash or a detached run)
// and Close removes all of it: processes first (by PID, SIGTERM then SIGKILL),
// then namespaces.
//
// Everything here needs root (CAP_NET_ADMIN and CAP_SYS_ADMIN). A Topology is
// safe for concurrent use; an NS is safe for concurrent use once built.
package topo
