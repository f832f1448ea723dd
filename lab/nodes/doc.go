// Package nodes builds the real-node lab: Kubernetes clusters on one host
// whose nodes are real kubelets. Each cluster has a control plane (etcd,
// kube-apiserver, kube-controller-manager and kube-scheduler, in the lab's
// underlay namespace) and two nodes, a gateway node labelled
// submariner.io/gateway=true and a worker. A node is a network namespace
// running containerd, kubelet and kube-proxy (nftables mode); pods get their
// addresses from the standard bridge and host-local CNI plugins, reach the
// other node's pods by plain routes, and are masqueraded when they leave
// the cluster's Pod CIDR, as kindnet does. Cluster DNS is a CoreDNS
// Deployment with no upstream. Every node and control plane shares one
// bridge, as kind's clusters share a Docker network, and the host reaches
// the API servers through a veth of its own.
//
// Images are written as archives on the host (deploy/imagetar) and imported
// into every node's containerd: there is no registry and no image daemon.
// Snorkel itself is installed only as a user installs it, by the CLI's
// deploy-broker, join and export; the lab starts no Snorkel process.
//
// Kubelet rewrites three host-wide sysctls when it starts; the lab records
// them first and puts them back after every kubelet start and at teardown.
// Down stops every process in each node's cgroup, unmounts what kubelet and
// containerd mounted, and deletes the namespaces, the cgroups and the state.
package nodes
