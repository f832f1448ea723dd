package dnsd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
)

// The static state file: what `snorkel dnsd --static FILE` serves, for
// labs and tests without Kubernetes. It is JSON (the command also takes
// YAML, converted to JSON first):
//
//	{
//	  "localCluster": "c1",
//	  "connected": ["c2"],
//	  "services": [{
//	    "namespace": "sample", "name": "whereami-cs", "type": "ClusterSetIP",
//	    "ports": [{"name": "http", "protocol": "TCP", "port": 80}],
//	    "clusters": [{"cluster": "c2", "ips": ["10.99.0.10"], "ready": true}]
//	  }, {
//	    "namespace": "sample", "name": "whereami-ss", "type": "Headless",
//	    "clusters": [{"cluster": "c2", "endpoints": [
//	      {"hostname": "whereami-0", "addresses": ["10.9.0.12"], "ready": true}]}]
//	  }]
//	}
//
// "connected" left out means every cluster of the file is connected;
// "ready" left out means ready; "type" left out means ClusterSetIP.

type fileState struct {
	LocalCluster string        `json:"localCluster"`
	Connected    *[]string     `json:"connected,omitempty"`
	Services     []fileService `json:"services"`
}

type fileService struct {
	Namespace string       `json:"namespace"`
	Name      string       `json:"name"`
	Type      string       `json:"type,omitempty"`
	Ports     []filePort   `json:"ports,omitempty"`
	IPs       []string     `json:"ips,omitempty"`
	Clusters  []fileExport `json:"clusters"`
}

type filePort struct {
	Name     string `json:"name,omitempty"`
	Protocol string `json:"protocol,omitempty"`
	Port     int    `json:"port"`
}

type fileExport struct {
	Cluster                  string         `json:"cluster"`
	IPs                      []string       `json:"ips,omitempty"`
	Ready                    *bool          `json:"ready,omitempty"`
	PublishNotReadyAddresses bool           `json:"publishNotReadyAddresses,omitempty"`
	Ports                    []filePort     `json:"ports,omitempty"`
	Endpoints                []fileEndpoint `json:"endpoints,omitempty"`
}

type fileEndpoint struct {
	Hostname  string   `json:"hostname,omitempty"`
	Addresses []string `json:"addresses"`
	Ready     *bool    `json:"ready,omitempty"`
}

// Service types in the static file: the MCS ServiceImport's.
const (
	TypeClusterSetIP = "ClusterSetIP"
	TypeHeadless     = "Headless"
)

// ParseState reads a static state file (JSON). Every problem is reported,
// each naming its field and the fix.
func ParseState(data []byte) (State, error) {
	var f fileState
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return State{}, fmt.Errorf("dnsd: state file: %w", err)
	}
	if dec.More() {
		return State{}, errors.New("dnsd: state file: more than one document; put everything in one")
	}
	var p problems
	st := State{LocalCluster: f.LocalCluster}
	if !isLabel(f.LocalCluster) {
		p.add("localCluster", "%q: give the ID of the cluster this dnsd serves (a DNS-1123 label, e.g. c1)", f.LocalCluster)
	}
	all := map[string]bool{}
	seen := map[string]int{}
	for i, fs := range f.Services {
		field := fmt.Sprintf("services[%d]", i)
		svc := fs.service(field, &p)
		k := svc.Namespace + "/" + svc.Name
		if j, dup := seen[k]; dup {
			p.add(field, "service %s is also services[%d]; list each service once, with all its clusters", k, j)
		}
		seen[k] = i
		for _, e := range svc.Exports {
			all[e.Cluster] = true
		}
		st.Services = append(st.Services, svc)
	}
	if f.Connected == nil {
		for c := range all {
			st.Connected = append(st.Connected, c)
		}
		slices.Sort(st.Connected)
	} else {
		for i, c := range *f.Connected {
			if !isLabel(c) {
				p.add(fmt.Sprintf("connected[%d]", i), "%q is not a cluster ID (a DNS-1123 label)", c)
			}
		}
		st.Connected = *f.Connected
	}
	if err := p.err(); err != nil {
		return State{}, err
	}
	return st, nil
}

func (fs *fileService) service(field string, p *problems) Service {
	svc := Service{Namespace: fs.Namespace, Name: fs.Name}
	if !isLabel(fs.Namespace) {
		p.add(field+".namespace", "%q: give the service's namespace, a DNS-1123 label", fs.Namespace)
	}
	if !isLabel(fs.Name) {
		p.add(field+".name", "%q: give the service's name, a DNS-1123 label", fs.Name)
	}
	switch fs.Type {
	case "", TypeClusterSetIP:
	case TypeHeadless:
		svc.Headless = true
	default:
		p.add(field+".type", "%q: use %s or %s", fs.Type, TypeClusterSetIP, TypeHeadless)
	}
	svc.Ports = parsePorts(field+".ports", fs.Ports, p)
	svc.ClusterSetIPs = parseIPs(field+".ips", fs.IPs, p)
	if svc.Headless && len(fs.IPs) > 0 {
		p.add(field+".ips", "a headless service has no clusterset IP; remove it or make the type %s", TypeClusterSetIP)
	}
	if len(fs.Clusters) == 0 {
		p.add(field+".clusters", "no cluster exports %s/%s; list at least one", fs.Namespace, fs.Name)
	}
	clusters := map[string]bool{}
	for i, fe := range fs.Clusters {
		ef := fmt.Sprintf("%s.clusters[%d]", field, i)
		if !isLabel(fe.Cluster) {
			p.add(ef+".cluster", "%q: give the exporting cluster's ID, a DNS-1123 label", fe.Cluster)
		} else if clusters[fe.Cluster] {
			p.add(ef+".cluster", "cluster %s is listed twice; list each cluster once", fe.Cluster)
		}
		clusters[fe.Cluster] = true
		svc.Exports = append(svc.Exports, fe.export(ef, svc.Headless, p))
	}
	return svc
}

func (fe *fileExport) export(field string, headless bool, p *problems) Export {
	e := Export{
		Cluster:         fe.Cluster,
		Ready:           fe.Ready == nil || *fe.Ready,
		PublishNotReady: fe.PublishNotReadyAddresses,
		IPs:             parseIPs(field+".ips", fe.IPs, p),
	}
	if fe.Ports != nil {
		e.Ports = parsePorts(field+".ports", fe.Ports, p)
	}
	if headless {
		if len(fe.IPs) > 0 {
			p.add(field+".ips", "a headless service's cluster has endpoints, not a service address; move the addresses to endpoints")
		}
		for i, fp := range fe.Endpoints {
			pf := fmt.Sprintf("%s.endpoints[%d]", field, i)
			if fp.Hostname != "" && !isLabel(fp.Hostname) {
				p.add(pf+".hostname", "%q is not a DNS-1123 label; use lower-case letters, digits and '-'", fp.Hostname)
			}
			if len(fp.Addresses) == 0 {
				p.add(pf+".addresses", "a pod needs at least one address")
			}
			e.Endpoints = append(e.Endpoints, Endpoint{
				Hostname:  fp.Hostname,
				Addresses: parseIPs(pf+".addresses", fp.Addresses, p),
				Ready:     fp.Ready == nil || *fp.Ready,
			})
		}
		return e
	}
	if len(fe.Endpoints) > 0 {
		p.add(field+".endpoints", "a ClusterSetIP service's cluster has one service address, not endpoints; give ips, or make the type %s", TypeHeadless)
	}
	if len(fe.IPs) == 0 {
		p.add(field+".ips", "give the cluster's service address (its ClusterIP, or its global IP under Globalnet)")
	}
	fams := map[family]bool{}
	for _, ip := range e.IPs {
		if fams[familyOf(ip)] {
			p.add(field+".ips", "at most one address per IP family")
			break
		}
		fams[familyOf(ip)] = true
	}
	return e
}

func parseIPs(field string, in []string, p *problems) []netip.Addr {
	var out []netip.Addr
	for i, s := range in {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			p.add(fmt.Sprintf("%s[%d]", field, i), "%q is not an IP address", s)
			continue
		}
		out = append(out, a.Unmap())
	}
	return out
}

func parsePorts(field string, in []filePort, p *problems) []Port {
	out := make([]Port, 0, len(in))
	for i, fp := range in {
		pf := fmt.Sprintf("%s[%d]", field, i)
		proto := strings.ToUpper(fp.Protocol)
		switch proto {
		case "":
			proto = "TCP"
		case "TCP", "UDP", "SCTP":
		default:
			p.add(pf+".protocol", "%q: use TCP, UDP or SCTP", fp.Protocol)
		}
		if fp.Port < 1 || fp.Port > 65535 {
			p.add(pf+".port", "%d: use 1 to 65535", fp.Port)
		}
		if fp.Name != "" && !isLabel(fp.Name) {
			p.add(pf+".name", "%q is not a DNS-1123 label; use lower-case letters, digits and '-'", fp.Name)
		}
		out = append(out, Port{Name: fp.Name, Protocol: proto, Port: uint16(fp.Port)})
	}
	return out
}

// EncodeState writes st in the static file's format, which ParseState
// reads back.
func EncodeState(st State) ([]byte, error) {
	f := fileState{LocalCluster: st.LocalCluster, Connected: &st.Connected, Services: []fileService{}}
	if st.Connected == nil {
		f.Connected = &[]string{}
	}
	for _, s := range st.Services {
		fs := fileService{Namespace: s.Namespace, Name: s.Name, Type: TypeClusterSetIP, IPs: ipStrings(s.ClusterSetIPs), Ports: filePorts(s.Ports)}
		if s.Headless {
			fs.Type = TypeHeadless
		}
		for _, e := range s.Exports {
			ready := e.Ready
			fe := fileExport{Cluster: e.Cluster, IPs: ipStrings(e.IPs), PublishNotReadyAddresses: e.PublishNotReady, Ports: filePorts(e.Ports)}
			if !s.Headless {
				fe.Ready = &ready
			}
			for _, ep := range e.Endpoints {
				ready := ep.Ready
				fe.Endpoints = append(fe.Endpoints, fileEndpoint{Hostname: ep.Hostname, Addresses: ipStrings(ep.Addresses), Ready: &ready})
			}
			fs.Clusters = append(fs.Clusters, fe)
		}
		f.Services = append(f.Services, fs)
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func ipStrings(in []netip.Addr) []string {
	var out []string
	for _, a := range in {
		out = append(out, a.String())
	}
	return out
}

func filePorts(in []Port) []filePort {
	var out []filePort
	for _, p := range in {
		out = append(out, filePort{Name: p.Name, Protocol: p.Protocol, Port: int(p.Port)})
	}
	return out
}

// problems collects what is wrong with a state file.
type problems []error

func (p *problems) add(field, format string, args ...any) {
	*p = append(*p, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
}

func (p problems) err() error {
	if len(p) == 0 {
		return nil
	}
	return fmt.Errorf("dnsd: state file: %w", errors.Join(p...))
}
