package perf

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strconv"

	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/lab"
)

// The kernel VXLAN baseline's device and the transit network its two ends
// share, from the shared address space of RFC 6598, which no lab range
// uses: each gateway node routes the remote CIDRs via the other's transit
// address, which the kernel resolves by ARP across the tunnel.
const kernelVXLANDev = "vxb0"

var kernelVXLANTransit = netip.MustParsePrefix("100.64.255.0/24")

// KernelVXLANSetup returns the setup of Linux vxlan devices in the gateway
// nodes of a lab with kernel routing, with Snorkel's VNI and UDP port,
// pointed at each other: the kernel's own implementation of what Snorkel's
// vxlan transport does in userspace.
func KernelVXLANSetup() Setup {
	return Setup{
		Name: BaselineKernelVXLAN,
		Tag:  "kv",
		Kind: KindBaseline,
		Up: func(ctx context.Context, env Env) (System, error) {
			s, err := upLab(ctx, env, lab.Basic(), lab.TransportKernel, SystemInfo{
				Name:           BaselineKernelVXLAN,
				Kind:           KindBaseline,
				Transport:      "vxlan",
				KernelDataPath: true,
				Description: fmt.Sprintf("Linux vxlan device (VNI %d, UDP port %d) in each gateway node over the underlay, the remote CIDRs routed through it, MSS clamped by nftables",
					gateway.DefaultVNI, gateway.DefaultPort),
			})
			if err != nil {
				return nil, err
			}
			if err := startKernelVXLAN(ctx, s); err != nil {
				return nil, errors.Join(err, s.Close())
			}
			s.info.TunnelMTU = s.gatewayLinkMTU(ctx, kernelVXLANDev)
			return s, nil
		},
	}
}

func startKernelVXLAN(ctx context.Context, s *labSystem) error {
	plan := s.lab.Plan
	if len(plan.Clusters) != 2 {
		return fmt.Errorf("perf: the kernel vxlan baseline joins two clusters, the scenario has %d", len(plan.Clusters))
	}
	transit := func(i int) netip.Addr {
		a := kernelVXLANTransit.Addr()
		for range i + 1 {
			a = a.Next()
		}
		return a
	}
	for i := range plan.Clusters {
		c, peer := &plan.Clusters[i], &plan.Clusters[1-i]
		ns, err := s.lab.Gateway(c.Spec.ID)
		if err != nil {
			return err
		}
		if _, err := ns.Run(ctx, "ip", "link", "add", kernelVXLANDev, "type", "vxlan",
			"id", strconv.Itoa(gateway.DefaultVNI), "dstport", strconv.Itoa(gateway.DefaultPort),
			"local", c.Gateway.UnderlayIP.Addr().String(), "remote", peer.Gateway.UnderlayIP.Addr().String(),
			"dev", lab.UnderlayLink); err != nil {
			return fmt.Errorf("perf: kernel vxlan device in %s: %w", ns, err)
		}
		if err := ns.AddAddr(kernelVXLANDev, netip.PrefixFrom(transit(i), kernelVXLANTransit.Bits())); err != nil {
			return err
		}
		if err := ns.LinkUp(kernelVXLANDev); err != nil {
			return err
		}
		for _, dst := range []netip.Prefix{peer.Spec.PodCIDR, peer.Spec.ServiceCIDR} {
			if _, err := ns.Run(ctx, "ip", "route", "replace", dst.String(), "via", transit(1-i).String(), "dev", kernelVXLANDev); err != nil {
				return err
			}
		}
		if err := ns.Nft(ctx, mssClampRuleset(kernelVXLANDev)); err != nil {
			return err
		}
	}
	return nil
}
