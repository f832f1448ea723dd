package nodes

import (
	"net/netip"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// TestScenariosAreTheTutorials checks the clusters against the
// tutorial's CIDRs and the layout the lab's routes rely on.
func TestScenariosAreTheTutorials(t *testing.T) {
	want := map[string]struct{ pods, services, global string }{
		"c1": {"10.8.0.0/16", "10.88.0.0/16", ""},
		"c2": {"10.9.0.0/16", "10.99.0.0/16", ""},
		"g1": {"10.7.0.0/16", "10.77.0.0/16", "120.1.0.0/24"},
		"g2": {"10.7.0.0/16", "10.77.0.0/16", "120.2.0.0/24"},
	}
	ips := map[netip.Addr]string{}
	for _, sc := range Scenarios() {
		for _, c := range sc.Clusters {
			w, ok := want[c.Name]
			if !ok {
				t.Fatalf("unexpected cluster %s", c.Name)
			}
			delete(want, c.Name)
			if c.PodCIDR.String() != w.pods || c.ServiceCIDR.String() != w.services {
				t.Errorf("%s: pods %s services %s, want %s %s", c.Name, c.PodCIDR, c.ServiceCIDR, w.pods, w.services)
			}
			if (w.global == "") != !c.GlobalCIDR.IsValid() || (w.global != "" && c.GlobalCIDR.String() != w.global) {
				t.Errorf("%s: global CIDR %v, want %q", c.Name, c.GlobalCIDR, w.global)
			}
			if c.Context() != "kind-"+c.Name {
				t.Errorf("%s: context %s", c.Name, c.Context())
			}
			if got := c.DNSIP(); !c.ServiceCIDR.Contains(got) || got.As4()[3] != 10 {
				t.Errorf("%s: DNS at %s", c.Name, got)
			}
			gateways := 0
			for _, n := range c.Nodes {
				if n.Gateway {
					gateways++
				}
				if !UnderlayCIDR.Contains(n.IP) || n.IP == APIHost || n.IP == HostAddr {
					t.Errorf("node %s at %s, outside the underlay or on its reserved addresses", n.Name, n.IP)
				}
				if prev, dup := ips[n.IP]; dup {
					t.Errorf("nodes %s and %s share %s", prev, n.Name, n.IP)
				}
				ips[n.IP] = n.Name
				if n.PodCIDR.Bits() != 24 || !c.PodCIDR.Contains(n.PodCIDR.Addr()) {
					t.Errorf("node %s pods %s, not a /24 of %s", n.Name, n.PodCIDR, c.PodCIDR)
				}
				if routes := podRoutes(c, n); len(routes) != len(c.Nodes)-1 {
					t.Errorf("node %s has %d pod routes, want one per other node", n.Name, len(routes))
				}
			}
			if gateways != 2 || len(c.Nodes) != 3 {
				t.Errorf("%s: %d nodes, %d gateways; want two gateway nodes and a worker", c.Name, len(c.Nodes), gateways)
			}
		}
	}
	if len(want) > 0 {
		t.Errorf("missing clusters %v", want)
	}
	if _, err := ScenarioByName("nope"); err == nil || !strings.Contains(err.Error(), "tutorial or globalnet") {
		t.Errorf("unknown scenario: %v", err)
	}
}

// TestNodeConfigs checks what the pitfalls of kubelet and containerd on
// this kind of host require of the files a node runs with.
func TestNodeConfigs(t *testing.T) {
	sc, _ := ScenarioByName("tutorial")
	c := sc.Clusters[0]
	n := c.Nodes[1]
	d := nodeDirs{"/run/lab/nodes/" + n.Name}
	cd := containerdConfig(d)
	for _, want := range []string{
		"restrict_oom_score_adj = true",
		"netns_mounts_under_state_dir = true",
		`sandbox_image = "` + PauseImage + `"`,
		`address = "/run/lab/nodes/c1-worker/run/containerd.sock"`,
		`Root = "/run/lab/nodes/c1-worker/run/runc"`,
		`conf_dir = "/run/lab/nodes/c1-worker/cni"`,
	} {
		if !strings.Contains(cd, want) {
			t.Errorf("containerd config lacks %s", want)
		}
	}
	b, err := kubeletConfig(c, n, d, "/lab-c1-worker")
	if err != nil {
		t.Fatal(err)
	}
	var kubelet map[string]any
	if err := yaml.Unmarshal(b, &kubelet); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]any{
		"failCgroupV1": false, "cgroupDriver": "cgroupfs", "cgroupRoot": "/lab-c1-worker",
		"address": "198.18.1.11", "resolvConf": d.file("resolv.conf"), "protectKernelDefaults": false,
	} {
		if kubelet[k] != want {
			t.Errorf("kubelet %s = %v, want %v", k, kubelet[k], want)
		}
	}
	if dns, _ := kubelet["clusterDNS"].([]any); len(dns) != 1 || dns[0] != "10.88.0.10" {
		t.Errorf("kubelet clusterDNS %v", kubelet["clusterDNS"])
	}
	if got := resolvConf(c); got != "nameserver 10.88.0.10\n" {
		t.Errorf("resolv.conf %q: pods must not inherit the host's resolver", got)
	}
	if strings.Contains(corefile, "forward") {
		t.Error("the Corefile forwards: no lookup may leave the machine")
	}
	b, err = kubeProxyConfig(c, nil, "")
	if err != nil {
		t.Fatal(err)
	}
	var proxy map[string]any
	if err := yaml.Unmarshal(b, &proxy); err != nil {
		t.Fatal(err)
	}
	if proxy["mode"] != "nftables" || proxy["clusterCIDR"] != "10.8.0.0/16" || proxy["hostnameOverride"] != nil {
		t.Errorf("the cluster's kube-proxy configuration %v", proxy)
	}
	if m := masqueradeRules(c); !strings.Contains(m, "ip saddr 10.8.0.0/16 ip daddr != 10.8.0.0/16 masquerade") {
		t.Errorf("masquerade %s", m)
	}
}

func TestUnescapeMount(t *testing.T) {
	if got := unescapeMount(`/run/a\040b/c`); got != "/run/a b/c" {
		t.Errorf("got %q", got)
	}
}
