package api

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/snorkel-net/snorkel/transport"
)

// DefaultCableDriver is IPsec, as Submariner's default (libreswan).
const DefaultCableDriver = transport.ESP

// ValidateClusterID checks that id is a DNS-1123 label, as a cluster ID
// must be.
func ValidateClusterID(id string) error {
	if id == "" {
		return fmt.Errorf("--clusterid is required: name this cluster in the clusterset with a DNS-1123 label, e.g. %q", "cluster-a")
	}
	if errs := validation.IsDNS1123Label(id); len(errs) > 0 {
		return fmt.Errorf("--clusterid %q is not a valid cluster ID: use at most 63 characters, lower-case letters, digits and '-', starting and ending with a letter or digit (a DNS-1123 label), e.g. %q",
			id, suggestClusterID(id))
	}
	return nil
}

// suggestClusterID turns id into a valid cluster ID, as an example for the
// error message.
func suggestClusterID(id string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(id) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	s := strings.Trim(b.String(), "-")
	if len(s) > validation.DNS1123LabelMaxLength {
		s = strings.TrimRight(s[:validation.DNS1123LabelMaxLength], "-")
	}
	if s == "" {
		return "cluster-a"
	}
	return s
}

// NormalizeCableDriver checks a cable driver and returns its canonical
// name; empty means DefaultCableDriver, and Submariner's "libreswan" is
// the esp driver.
func NormalizeCableDriver(d string) (string, error) {
	switch d = strings.ToLower(strings.TrimSpace(d)); d {
	case "":
		return DefaultCableDriver, nil
	case "libreswan":
		return transport.ESP, nil
	}
	if !slices.Contains(transport.Kinds, d) {
		return "", fmt.Errorf("--cable-driver %q is unknown: use one of %s (esp is IPsec, as Submariner's libreswan)", d, strings.Join(transport.Kinds, ", "))
	}
	return d, nil
}

// ParseCIDRs parses the CIDRs of a flag (or other named source), each a
// network address.
func ParseCIDRs(flag string, cidrs []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range cidrs {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return nil, fmt.Errorf("%s %q is not a CIDR: give one such as 10.8.0.0/16", flag, s)
		}
		if p != p.Masked() {
			return nil, fmt.Errorf("%s %q is not a network address: did you mean %s?", flag, s, p.Masked())
		}
		out = append(out, p)
	}
	return out, nil
}

// ValidateNATTPort checks the gateway's UDP port (--nattport).
func ValidateNATTPort(port int) error {
	if port < 1 || port > 65535 {
		return fmt.Errorf("--nattport %d is not a UDP port: use 1 to 65535 (default %d)", port, DefaultNATTPort)
	}
	return nil
}

// ValidateHealthCheck checks join's --health-check-interval (seconds) and
// --health-check-max-packet-loss-count; 0 stands for the default.
func ValidateHealthCheck(interval, maxLoss int) error {
	if err := validateHealthSetting("--health-check-interval", interval, maxHealthCheckInterval); err != nil {
		return err
	}
	return validateHealthSetting("--health-check-max-packet-loss-count", maxLoss, maxHealthCheckMaxPacketLossCount)
}

func validateHealthSetting(flag string, n, maximum int) error {
	if n < 0 || n > maximum {
		return fmt.Errorf("%s %d is out of range: use 1 to %d", flag, n, maximum)
	}
	return nil
}

// ValidateCustomDomains checks the extra DNS zones of --custom-domains:
// each a DNS name, none the clusterset's own, none given twice.
func ValidateCustomDomains(domains []string) error {
	seen := map[string]bool{ClustersetDomain: true}
	for _, d := range domains {
		if errs := validation.IsDNS1123Subdomain(d); len(errs) > 0 {
			return fmt.Errorf("--custom-domains %q is not a DNS domain: use lower-case labels of letters, digits and '-' separated by dots, e.g. %q", d, "supercluster.local")
		}
		if seen[d] {
			return fmt.Errorf("--custom-domains names %q twice, or names %s, which dnsd always serves; give each extra domain once", d, ClustersetDomain)
		}
		seen[d] = true
	}
	return nil
}
