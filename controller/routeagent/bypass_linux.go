package routeagent

import (
	"errors"
	"fmt"
	"net/netip"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	"golang.org/x/sys/unix"
)

// The masquerade bypass: an nftables table of the route agent's own,
//
//	table ip snorkel-routeagent {
//		set remote-cidrs { type ipv4_addr; flags interval; elements = { ... } }
//		chain postrouting {
//			type nat hook postrouting priority srcnat - 10;
//			ip daddr @remote-cidrs snat to ip saddr
//		}
//	}
//
// The CNI masquerades what pods send off the pod network (kindnet, the
// bridge plugin's ipMasq: `ip saddr <podCIDR> ip daddr != <podCIDR>
// masquerade`), which would give traffic for a remote cluster the node's
// address, and the far gateway drops a source outside the sending cluster's
// CIDRs as spoofed. Netfilter runs the nat base chains of a hook in priority
// order and stops at the first that sets up a source NAT binding for the
// connection (nf_nat_inet_fn checks nf_nat_initialized after each chain).
// The identity SNAT here, at priority 90, is that binding, so the CNI's
// masquerade at srcnat (100: iptables-legacy, iptables-nft or nftables
// alike) never applies and the packet leaves with the pod's address. The
// rule matches only the remote CIDRs: everything else still goes through
// the CNI's masquerade. IPv4 only, as the routes are.
const (
	// TableName is the route agent's nftables table, of family ip.
	TableName = "snorkel-routeagent"
	// SetName is the set of remote CIDRs in TableName.
	SetName = "remote-cidrs"
	// ChainName is TableName's nat chain on the postrouting hook.
	ChainName = "postrouting"
	// ChainPriority runs ChainName just before srcnat (100), where the
	// CNIs masquerade.
	ChainPriority = 90
)

// syncBypass makes the table hold exactly the bypass for cidrs, in one
// nftables transaction: the set is flushed and filled, and the chain
// flushed and given its rule, at once, so no packet sees the set half
// written or the chain empty. Doing the whole table each time puts back
// whatever was changed by hand. A table that cannot be brought to shape
// that way (a set or chain of the same name made differently) is made
// again from nothing.
func (n *node) syncBypass(cidrs []netip.Prefix) error {
	err := n.writeBypass(cidrs, false)
	if err == nil {
		return nil
	}
	if err2 := n.writeBypass(cidrs, true); err2 != nil {
		return fmt.Errorf("routeagent: nftables table ip %s: %w", TableName, errors.Join(err, err2))
	}
	return nil
}

func (n *node) writeBypass(cidrs []netip.Prefix, recreate bool) error {
	c := n.nft
	t := &nftables.Table{Family: nftables.TableFamilyIPv4, Name: TableName}
	c.AddTable(t)
	if recreate {
		// Adding first makes the delete valid whether or not the table
		// was there.
		c.DelTable(t)
		c.AddTable(t)
	}
	set := &nftables.Set{Table: t, Name: SetName, KeyType: nftables.TypeIPAddr, Interval: true}
	if err := c.AddSet(set, nil); err != nil {
		return err
	}
	c.FlushSet(set)
	if elems := intervals(cidrs); len(elems) > 0 {
		if err := c.SetAddElements(set, elems); err != nil {
			return err
		}
	}
	ch := c.AddChain(&nftables.Chain{
		Table:    t,
		Name:     ChainName,
		Type:     nftables.ChainTypeNAT,
		Hooknum:  nftables.ChainHookPostrouting,
		Priority: nftables.ChainPriorityRef(ChainPriority),
	})
	c.FlushChain(ch)
	c.AddRule(&nftables.Rule{Table: t, Chain: ch, Exprs: identitySNAT(set)})
	return c.Flush()
}

// identitySNAT is `ip daddr @set snat to ip saddr`.
func identitySNAT(set *nftables.Set) []expr.Any {
	return []expr.Any{
		// ip daddr (offset 16 of the IPv4 header)
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 16, Len: 4},
		&expr.Lookup{SourceRegister: 1, SetName: set.Name, SetID: set.ID},
		// ip saddr (offset 12)
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseNetworkHeader, Offset: 12, Len: 4},
		&expr.NAT{Type: expr.NATTypeSourceNAT, Family: unix.NFPROTO_IPV4, RegAddrMin: 1},
	}
}

// intervals are the elements of an interval set holding cidrs: each
// range's first address, and the address after its last marked as the
// interval's end. The kernel refuses overlapping intervals, so nested and
// adjacent CIDRs are merged first. A range that ends at 255.255.255.255
// has no end element: it runs to the end of the key space.
func intervals(cidrs []netip.Prefix) []nftables.SetElement {
	type span struct{ first, last netip.Addr }
	var spans []span
	for _, p := range normalize(cidrs) {
		s := span{p.Addr(), lastAddr(p)}
		if k := len(spans) - 1; k >= 0 && (s.first.Compare(spans[k].last) <= 0 || spans[k].last.Next() == s.first) {
			if s.last.Compare(spans[k].last) > 0 {
				spans[k].last = s.last
			}
			continue
		}
		spans = append(spans, s)
	}
	var out []nftables.SetElement
	for _, s := range spans {
		out = append(out, nftables.SetElement{Key: s.first.AsSlice()})
		if end := s.last.Next(); end.IsValid() {
			out = append(out, nftables.SetElement{Key: end.AsSlice(), IntervalEnd: true})
		}
	}
	return out
}

// lastAddr is the last address of the IPv4 prefix p.
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	// For a /0 the shift gives 0, and 0-1 every host bit.
	host := uint32(1)<<(32-p.Bits()) - 1
	v := uint32(a[0])<<24 | uint32(a[1])<<16 | uint32(a[2])<<8 | uint32(a[3]) | host
	return netip.AddrFrom4([4]byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)})
}

// removeBypass deletes the table, and says whether there was one.
func (n *node) removeBypass() (bool, error) {
	tables, err := n.nft.ListTablesOfFamily(nftables.TableFamilyIPv4)
	if err != nil {
		return false, fmt.Errorf("routeagent: list the nftables tables: %w", err)
	}
	for _, t := range tables {
		if t.Name == TableName {
			n.nft.DelTable(t)
			if err := n.nft.Flush(); err != nil {
				return false, fmt.Errorf("routeagent: delete nftables table ip %s: %w", TableName, err)
			}
			return true, nil
		}
	}
	return false, nil
}
