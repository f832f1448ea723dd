package agent

import (
	"net"
	"net/netip"
)

// HealthCheckAddress chooses the gateway's health-check address when none
// is given, as Submariner does: the node's address inside the cluster's
// Pod CIDRs (the CNI's bridge or interface on the node, e.g. cni0's
// 10.8.0.1), which also gives host-network traffic to remote clusters a
// source the far gateway accepts; else the gateway's private IP, which
// every node has from the start (a CNI interface appears only with the
// node's first pod). addrs are the node's interface addresses; tun, the
// gateway's own device, is skipped by the caller.
func HealthCheckAddress(podCIDRs []string, privateIP string, addrs []netip.Addr) string {
	for _, s := range podCIDRs {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if p.Contains(a) {
				return a.String()
			}
		}
	}
	return privateIP
}

// InterfaceAddrs lists the host's interface addresses, but those of the
// device skip (the gateway's TUN device, which carries the health-check
// address once chosen).
func InterfaceAddrs(skip string) []netip.Addr {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, ifc := range ifs {
		if ifc.Name == skip {
			continue
		}
		as, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range as {
			if n, ok := a.(*net.IPNet); ok {
				if ip, ok := netip.AddrFromSlice(n.IP); ok {
					out = append(out, ip.Unmap())
				}
			}
		}
	}
	return out
}
