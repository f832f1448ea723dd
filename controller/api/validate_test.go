package api

import (
	"strings"
	"testing"
)

func TestValidateClusterIDExplainsAndSuggests(t *testing.T) {
	for _, tc := range []struct {
		id, example string
	}{
		{"Bad_ID", `"bad-id"`},
		{"-x", `"x"`},
		{strings.Repeat("a", 64), `"` + strings.Repeat("a", 63) + `"`},
		{"", `"cluster-a"`},
		{"c1.example", `"c1-example"`},
	} {
		err := ValidateClusterID(tc.id)
		if err == nil {
			t.Errorf("%q accepted", tc.id)
			continue
		}
		msg := err.Error()
		if !strings.Contains(msg, "--clusterid") || !strings.Contains(msg, "DNS-1123 label") || !strings.Contains(msg, "e.g. "+tc.example) {
			t.Errorf("%q: %q, want the flag, what is allowed and the example %s", tc.id, msg, tc.example)
		}
	}
	for _, ok := range []string{"c1", "cluster-a", "0", strings.Repeat("a", 63)} {
		if err := ValidateClusterID(ok); err != nil {
			t.Errorf("%q refused: %v", ok, err)
		}
	}
}

func TestNormalizeCableDriver(t *testing.T) {
	for in, want := range map[string]string{"": "esp", "esp": "esp", "WireGuard": "wireguard", "vxlan": "vxlan", "libreswan": "esp"} {
		if got, err := NormalizeCableDriver(in); err != nil || got != want {
			t.Errorf("%q = %q, %v; want %q", in, got, err, want)
		}
	}
	_, err := NormalizeCableDriver("ipsec")
	if err == nil || !strings.Contains(err.Error(), "--cable-driver") || !strings.Contains(err.Error(), "wireguard, esp, vxlan") {
		t.Errorf("ipsec: %v, want an error naming --cable-driver and the choices", err)
	}
}

func TestParseCIDRsNamesTheFlag(t *testing.T) {
	if _, err := ParseCIDRs("--clustercidr", []string{"10.8.0.1/16"}); err == nil || !strings.Contains(err.Error(), "--clustercidr") || !strings.Contains(err.Error(), "10.8.0.0/16") {
		t.Errorf("host bits set: %v", err)
	}
	if _, err := ParseCIDRs("--servicecidr", []string{"services"}); err == nil || !strings.Contains(err.Error(), "--servicecidr") {
		t.Errorf("not a CIDR: %v", err)
	}
	ps, err := ParseCIDRs("--clustercidr", []string{"10.8.0.0/16", " fd00:8::/64 "})
	if err != nil || len(ps) != 2 {
		t.Errorf("dual-stack: %v %v", ps, err)
	}
}
