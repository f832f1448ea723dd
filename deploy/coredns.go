package deploy

import (
	_ "embed"
	"fmt"
	"net/netip"
	"regexp"
	"strings"
)

// coreDNSSection is deploy/coredns/clusterset.Corefile: the section
// Submariner's operator adds at the top of a cluster's Corefile so that
// the cluster's CoreDNS forwards the clusterset zone to Lighthouse's DNS
// server; here, to dnsd. Its markers are the operator's, so that tools
// that find, replace or remove the operator's section handle this one.
//
//go:embed coredns/clusterset.Corefile
var coreDNSSection string

// Markers of the section.
const (
	coreDNSSectionStart = "#lighthouse-start"
	coreDNSSectionEnd   = "#lighthouse-end"
)

// CoreDNSStanza is the Corefile section that forwards clusterset.local,
// and then each of customDomains (`snorkel join --custom-domains`), to
// dnsd at dnsdAddr ("IP", port 53, or "IP:port"), as the operator writes
// it for a Corefile whose main server block listens on port 53.
func CoreDNSStanza(dnsdAddr string, customDomains ...string) (string, error) {
	return coreDNSStanza(dnsdAddr, "53", customDomains)
}

// coreDNSStanza repeats the section's server block for each custom
// domain, as the operator writes one block per domain.
func coreDNSStanza(dnsdAddr, port string, customDomains []string) (string, error) {
	if _, err := netip.ParseAddr(dnsdAddr); err != nil {
		if _, err := netip.ParseAddrPort(dnsdAddr); err != nil {
			return "", fmt.Errorf("deploy: dnsd address %q: give an IP (e.g. the dnsd Service's ClusterIP) or IP:port", dnsdAddr)
		}
	}
	s := strings.ReplaceAll(coreDNSSection, "DNSD_ADDRESS", dnsdAddr)
	s = strings.ReplaceAll(s, "clusterset.local:53 {", "clusterset.local:"+port+" {")
	start := strings.Index(s, "clusterset.local:")
	end := strings.Index(s, coreDNSSectionEnd)
	block := s[start:end]
	var b strings.Builder
	b.WriteString(s[:end])
	for _, d := range customDomains {
		b.WriteString(strings.Replace(block, "clusterset.local:", d+":", 1))
	}
	b.WriteString(s[end:])
	return b.String(), nil
}

// mainBlockPort finds the port of a Corefile's root server block, ".:PORT {".
var mainBlockPort = regexp.MustCompile(`(?m)^\s*\.:(\d+)\s*\{`)

// AddCoreDNSStanza returns corefile with the clusterset section at its
// top, forwarding clusterset.local and customDomains to dnsdAddr, as the
// operator edits a cluster's Corefile: a section already there (the
// operator's or an earlier one) is replaced, and the section listens on
// the port of the root server block (53 when the Corefile does not say).
func AddCoreDNSStanza(corefile, dnsdAddr string, customDomains ...string) (string, error) {
	port := "53"
	if m := mainBlockPort.FindStringSubmatch(corefile); m != nil {
		port = m[1]
	}
	section, err := coreDNSStanza(dnsdAddr, port, customDomains)
	if err != nil {
		return "", err
	}
	return section + RemoveCoreDNSStanza(corefile), nil
}

// RemoveCoreDNSStanza returns corefile without the clusterset section:
// the lines from a start marker to its end marker, both included, as the
// operator's cleanup removes its section. A Corefile without one is
// returned unchanged.
func RemoveCoreDNSStanza(corefile string) string {
	var b strings.Builder
	skip := false
	for line := range strings.SplitAfterSeq(corefile, "\n") {
		switch {
		case strings.Contains(line, coreDNSSectionStart):
			skip = true
		case strings.Contains(line, coreDNSSectionEnd):
			skip = false
		case !skip:
			b.WriteString(line)
		}
	}
	return b.String()
}
