package perf

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/lab"
	"github.com/snorkel-net/snorkel/lab/topo"
	"github.com/snorkel-net/snorkel/transport/wireguard"
)

// wgSocketDir is where wireguard-go creates its UAPI sockets, for every
// namespace alike.
const wgSocketDir = "/var/run/wireguard"

// wireGuardGoPort is the baselines' listen port: Snorkel's default, so that
// both send the same UDP on the underlay.
const wireGuardGoPort = gateway.DefaultPort

// ErrNoWireGuardGo is returned by FindWireGuardGo when there is no binary.
var ErrNoWireGuardGo = errors.New("perf: no wireguard-go binary; run `make tools` to build the version go.mod pins into .cache/bin, or set WG_GO=/path/to/wireguard-go")

// FindWireGuardGo returns the wireguard-go binary the baseline runs: $WG_GO
// if set, else .cache/bin/wireguard-go (what `make tools` builds) in the
// working directory, one of its parents, or beside the directory of the
// running binary (bin/snorkel next to .cache/).
func FindWireGuardGo() (string, error) {
	if p := os.Getenv("WG_GO"); p != "" {
		if err := executable(p); err != nil {
			return "", fmt.Errorf("perf: WG_GO=%s: %w", p, err)
		}
		return p, nil
	}
	rel := filepath.Join(".cache", "bin", "wireguard-go")
	var dirs []string
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; d = filepath.Dir(d) {
			dirs = append(dirs, d)
			if filepath.Dir(d) == d {
				break
			}
		}
	}
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(filepath.Dir(exe)))
	}
	for _, d := range dirs {
		if p := filepath.Join(d, rel); executable(p) == nil {
			return p, nil
		}
	}
	return "", ErrNoWireGuardGo
}

func executable(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if st.IsDir() || st.Mode()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", p)
	}
	return nil
}

// WireGuardGoSetup returns the setup of plain wireguard-go, configured with
// wg(8), in the gateway nodes of a lab with kernel routing: the same
// topology as Snorkel's, the same tunnel MTU, MSS clamped like Snorkel's
// gateway clamps it, and the remote clusters' CIDRs routed into the
// wireguard-go device instead of over the underlay. An empty bin is found
// with FindWireGuardGo; without one the system is unavailable.
func WireGuardGoSetup(bin string, mtu int) Setup {
	return Setup{
		Name: BaselineWireGuardGo,
		Tag:  "wg",
		Kind: KindBaseline,
		Check: func() error {
			if bin != "" {
				return executable(bin)
			}
			p, err := FindWireGuardGo()
			bin = p
			return err
		},
		Up: func(ctx context.Context, env Env) (System, error) {
			s, err := upLab(ctx, env, lab.Basic(), lab.TransportKernel, SystemInfo{
				Name:        BaselineWireGuardGo,
				Kind:        KindBaseline,
				Transport:   "wireguard",
				Description: fmt.Sprintf("wireguard-go on a TUN device in each gateway node, configured with wg, MTU %d, MSS clamped by nftables", mtu),
				Version:     binaryVersion(ctx, bin, "--version"),
				TunnelMTU:   mtu,
			})
			if err != nil {
				return nil, err
			}
			if err := startWireGuardGo(ctx, s, bin, mtu, env); err != nil {
				return nil, errors.Join(err, s.Close())
			}
			s.tunnel = s.gatewayProcesses("wireguard-go-")
			return s, nil
		},
	}
}

func startWireGuardGo(ctx context.Context, s *labSystem, bin string, mtu int, env Env) error {
	plan := s.lab.Plan
	keys := map[string]wireguard.Key{}
	for _, c := range plan.Clusters {
		k, err := wireguard.GenerateKey()
		if err != nil {
			return err
		}
		keys[c.Spec.ID] = k
	}
	for i := range plan.Clusters {
		c := &plan.Clusters[i]
		ns, err := s.lab.Gateway(c.Spec.ID)
		if err != nil {
			return err
		}
		dev := c.Gateway.TUN
		// wireguard-go daemonises unless told not to; the topology can only
		// track and stop a process that stays in the foreground.
		p, err := ns.Start("wireguard-go-"+c.Spec.ID, "env", "WG_PROCESS_FOREGROUND=1", "LOG_LEVEL=error", bin, dev)
		if err != nil {
			return err
		}
		if err := waitUAPI(ctx, p, dev); err != nil {
			return err
		}
		args := []string{"set", dev, "private-key", "/dev/stdin", "listen-port", strconv.Itoa(wireGuardGoPort)}
		var cidrs []netip.Prefix
		for _, r := range plan.Remotes(c) {
			rc := []netip.Prefix{r.Spec.PodCIDR, r.Spec.ServiceCIDR}
			cidrs = append(cidrs, rc...)
			args = append(args, "peer", keys[r.Spec.ID].Public().String(),
				"endpoint", netip.AddrPortFrom(r.Gateway.UnderlayIP.Addr(), wireGuardGoPort).String(),
				"allowed-ips", joinPrefixes(rc))
		}
		cmd := ns.Command(ctx, "wg", args...)
		cmd.Stdin = strings.NewReader(keys[c.Spec.ID].String() + "\n")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("perf: wg set %s in %s: %w: %s", dev, ns, err, strings.TrimSpace(string(out)))
		}
		if err := ns.SetMTU(dev, mtu); err != nil {
			return err
		}
		if err := ns.AddAddr(dev, netip.PrefixFrom(c.Gateway.NodeIP, 32)); err != nil {
			return err
		}
		if err := ns.LinkUp(dev); err != nil {
			return err
		}
		// The kernel lab routes the remote CIDRs over the underlay;
		// replace those routes, as Snorkel's gateway adds its own.
		for _, dst := range cidrs {
			if _, err := ns.Run(ctx, "ip", "route", "replace", dst.String(), "dev", dev, "src", c.Gateway.NodeIP.String()); err != nil {
				return err
			}
		}
		if err := ns.Nft(ctx, mssClampRuleset(dev)); err != nil {
			return err
		}
		fmt.Fprintf(env.Progress, "  %s: wireguard-go (pid %d) on %s, MTU %d, peers %s\n", c.Spec.ID, p.PID, dev, mtu, joinPrefixes(cidrs))
	}
	return nil
}

// waitUAPI waits until wireguard-go has created dev's UAPI socket, through
// which wg configures it.
func waitUAPI(ctx context.Context, p *topo.Process, dev string) error {
	sock := filepath.Join(wgSocketDir, dev+".sock")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(sock); err == nil {
			return nil
		}
		if !p.Alive() {
			b, _ := os.ReadFile(p.Log)
			return fmt.Errorf("perf: wireguard-go for %s exited: %v: %s", dev, p.ExitError(), strings.TrimSpace(string(b)))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("perf: wireguard-go for %s created no %s within 10s; log %s", dev, sock, p.Log)
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// mssClampRuleset clamps the MSS of TCP SYNs leaving through dev to the
// route's MTU, as Snorkel's gateway clamps them to the tunnel's: without it
// the baseline's flows would start by discovering the path MTU, and the two
// would not carry the same segments.
func mssClampRuleset(dev string) string {
	return fmt.Sprintf(`table inet snorkel-bench-mss {
	chain forward {
		type filter hook forward priority mangle; policy accept;
		oifname %q tcp flags syn / syn,rst tcp option maxseg size set rt mtu
	}
}
`, dev)
}

func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	return strings.Join(s, ",")
}
