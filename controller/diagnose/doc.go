// Package diagnose is `snorkel diagnose`: it reads a member cluster's
// objects and says, check by check, what is misconfigured and how to fix
// it, with subctl's diagnose status lines (" ✓ …", " ⚠ …", " ✗ …: fix").
//
// Most checks read the API server only: the Kubernetes version, the
// agent's deployment, the Gateway objects' connections, the CNI and
// kube-proxy configuration, Globalnet's allocations, and service
// discovery's DNS forward and imports. With Options.Probe, three checks
// also send packets, from short-lived pods (the hidden `snorkel lab-pod`
// programs of package netprobe) in a namespace snorkel-diagnose-xxxxx of
// each cluster, deleted at the end of the run, also after an interrupt:
//
//   - firewall: marked UDP datagrams from the active gateway node to each
//     remote gateway's tunnel port, watched for on the remote gateway
//     node past its firewall; ICMP echo to the remote health-check IP
//     through the tunnel; ICMP echo with TTL 1 from every other node to
//     the gateway node, which the route agent's routes need on-link.
//   - connections: from a pod to a remote pod, the TCP MSS and the largest
//     DF packet that crosses, against the MTU of the gateway's TUN device.
//   - cni: from a pod on every node, the source address a remote pod sees,
//     which a masquerade rule on that node would rewrite.
//
// The probes between clusters need the other cluster among the targets;
// without it, the firewall check reads what the gateways reported.
//
// Run walks the targets one after the other from the calling goroutine;
// nothing but the probe namespaces is written to any cluster, and nothing
// is cached between calls.
package diagnose
