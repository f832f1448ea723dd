package verify

import (
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/snorkel-net/snorkel/controller/api"
)

// Kind is a group of checks, as --only names it.
type Kind string

// The kinds of checks, in the order they run and print.
const (
	Connectivity     Kind = api.ComponentConnectivity
	ServiceDiscovery Kind = api.ComponentServiceDiscovery
)

// Kinds are every kind, the default of --only.
var Kinds = []Kind{Connectivity, ServiceDiscovery}

// notRun are subctl verify's other verifications, and why Snorkel does
// not run them.
var notRun = map[string]string{
	"compliance":       "subctl's compliance verification checks Submariner's pod security settings; Snorkel has no equivalent",
	"gateway-failover": "Snorkel verifies no gateway failover; it would move the gateway and disrupt traffic",
}

// ParseKinds reads --only: kinds separated by commas. subctl's
// basic-connectivity is connectivity, whose checks are all basic here.
func ParseKinds(csv string) ([]Kind, error) {
	var kinds []Kind
	for _, s := range strings.Split(csv, ",") {
		s = strings.ToLower(strings.TrimSpace(s))
		var k Kind
		switch s {
		case "":
			continue
		case string(Connectivity), "basic-connectivity":
			k = Connectivity
		case string(ServiceDiscovery):
			k = ServiceDiscovery
		default:
			if why, ok := notRun[s]; ok {
				return nil, fmt.Errorf("--only %s: %s; give %s", s, why, kindNames())
			}
			return nil, fmt.Errorf("--only: unknown verification %q; give %s", s, kindNames())
		}
		if !slices.Contains(kinds, k) {
			kinds = append(kinds, k)
		}
	}
	if len(kinds) == 0 {
		return nil, fmt.Errorf("--only names no verification; give %s", kindNames())
	}
	slices.SortFunc(kinds, func(a, b Kind) int { return slices.Index(Kinds, a) - slices.Index(Kinds, b) })
	return kinds, nil
}

func kindNames() string {
	s := make([]string, len(Kinds))
	for i, k := range Kinds {
		s[i] = string(k)
	}
	return strings.Join(s, " and/or ")
}

// Node is a node client or server pods run on.
type Node struct {
	Name    string
	Gateway bool
}

func (n Node) String() string {
	if n.Gateway {
		return n.Name + " (gateway)"
	}
	return n.Name + " (non-gateway)"
}

// Cluster is what the plan knows of one cluster.
type Cluster struct {
	Context string
	// ID is the cluster's ID in the clusterset; GlobalCIDR its global
	// CIDR under Globalnet, invalid without.
	ID         string
	GlobalCIDR netip.Prefix
	// ServiceDiscovery is whether join deployed service discovery.
	ServiceDiscovery bool
	// Gateway is a schedulable gateway node; Other a schedulable node
	// without the gateway label, empty when there is none.
	Gateway, Other string
}

// Nodes are the nodes checks run on: the gateway node, then the other
// when there is one.
func (c Cluster) Nodes() []Node {
	nodes := []Node{{Name: c.Gateway, Gateway: true}}
	if c.Other != "" {
		nodes = append(nodes, Node{Name: c.Other})
	}
	return nodes
}

// Servers are the whereami servers running in the target cluster.
type Servers struct {
	Namespace string
	// Service is the ClusterIP Service in front of the pods, Headless the
	// headless one (the StatefulSet's).
	Service, Headless string
	ClusterIP         netip.Addr
	Pods              []ServerPod
}

// ServerPod is one whereami server.
type ServerPod struct {
	Name string
	IP   netip.Addr
	Node Node
}

// serverPort is the port whereami listens on; the ClusterIP Service maps
// servicePort to it.
const (
	serverPort  = 8080
	servicePort = 80
)

// Check is one check of the plan: a lab-pod command to run from a node
// of the source cluster, or a check that cannot apply and why.
type Check struct {
	Kind Kind
	// Name says what is checked; From and To are the table's columns.
	Name, From, To string
	// Node runs the check pod; Args are its lab-pod arguments. Both are
	// empty when Skip says why the check is skipped.
	Node Node
	Args []string
	Skip string
}

// Tries is how each check pod tries: subctl's --connection-timeout,
// --connection-attempts and --packet-size.
type Tries struct {
	// Retry bounds a check's attempts together; Attempt each of them
	// (0: lab-pod's own bound, 5 s).
	Retry, Attempt time.Duration
	// PacketSize, when above 0, makes each check by address also fetch
	// that many bytes from the server, which crosses the tunnel as
	// full-size packets (subctl sends them over TCP too).
	PacketSize int
}

// args are the lab-pod arguments of t.
func (t Tries) args() []string {
	a := []string{"--retry-until=" + t.Retry.String()}
	if t.Attempt > 0 {
		a = append(a, "--timeout="+t.Attempt.String())
	}
	return a
}

// Plan is the checks of kinds from a client on each of from's nodes to
// the servers s in to, each check pod trying as t says. Under Globalnet
// (from's GlobalCIDR is set; to's then is too) pod and Service IPs overlap
// between clusters, so the checks by address are skipped and the checks
// by name expect global IPs.
func Plan(from, to Cluster, s Servers, kinds []Kind, t Tries) []Check {
	globalnet := from.GlobalCIDR.IsValid()
	fetch := func(url string, expect ...string) []string {
		a := append([]string{"lab-pod", "fetch", url}, t.args()...)
		return append(append(a, "--expect-cluster="+to.ID), expect...)
	}
	// A check by address also moves PacketSize bytes.
	fetchBytes := func(url string, expect ...string) []string {
		if t.PacketSize > 0 {
			expect = append(expect, fmt.Sprintf("--bytes=%d", t.PacketSize))
		}
		return fetch(url, expect...)
	}
	resolve := func(name, expect string) []string {
		return append(append([]string{"lab-pod", "resolve", name}, t.args()...), expect)
	}
	// Without Globalnet a server sees the client pod's own address; with
	// it, an address of from's global CIDR.
	clientIn := "--expect-client-in=$(" + podIPEnv + ")"
	if globalnet {
		clientIn = "--expect-client-in=" + from.GlobalCIDR.String()
	}
	var checks []Check
	for _, kind := range kinds {
		if kind == ServiceDiscovery && !from.ServiceDiscovery {
			checks = append(checks, Check{Kind: kind, Name: "service discovery", From: from.ID, To: to.ID,
				Skip: fmt.Sprintf("service discovery is not deployed in context %s", from.Context)})
			continue
		}
		if kind == Connectivity && globalnet {
			checks = append(checks,
				Check{Kind: kind, Name: "HTTP to each server pod's IP", From: from.ID, To: to.ID, Skip: "Globalnet, pod IPs overlap"},
				Check{Kind: kind, Name: "HTTP to the ClusterIP", From: from.ID, To: to.ID, Skip: "Globalnet, Service IPs overlap"})
			continue
		}
		for _, n := range from.Nodes() {
			c := Check{Kind: kind, From: from.ID + " " + n.String(), Node: n}
			add := func(name, target string, args []string) {
				c.Name, c.To, c.Args = name, to.ID+" "+target, args
				checks = append(checks, c)
			}
			switch kind {
			case Connectivity:
				for _, p := range s.Pods {
					add("HTTP to the server pod's IP", fmt.Sprintf("pod %s %s on %s", p.Name, p.IP, p.Node),
						fetchBytes(url(p.IP.String(), serverPort), "--expect-pod="+p.Name, clientIn))
				}
				add("HTTP to the ClusterIP", "service "+s.Service+" "+s.ClusterIP.String(),
					fetchBytes(url(s.ClusterIP.String(), servicePort)))
			case ServiceDiscovery:
				name := s.Service + "." + s.Namespace + ".svc." + api.ClustersetDomain
				expect := "--expect=" + s.ClusterIP.String()
				if globalnet {
					expect = "--expect-in=" + to.GlobalCIDR.String()
				}
				add("DNS of the service", name, resolve(name, expect))
				add("HTTP to the service's name", name, fetch(url(name, servicePort)))
				for _, p := range s.Pods {
					name := p.Name + "." + to.ID + "." + s.Headless + "." + s.Namespace + ".svc." + api.ClustersetDomain
					expect := "--expect=" + p.IP.String()
					if globalnet {
						expect = "--expect-in=" + to.GlobalCIDR.String()
					}
					add("DNS of the pod's headless name", name, resolve(name, expect))
					// A headless name maps no Service port: ask the pod's.
					add("HTTP to the pod's headless name", fmt.Sprintf("%s:%d on %s", name, serverPort, p.Node),
						fetch(url(name, serverPort), "--expect-pod="+p.Name, clientIn))
				}
			}
		}
	}
	return checks
}

func url(host string, port int) string {
	return "http://" + net.JoinHostPort(host, fmt.Sprint(port)) + "/"
}
