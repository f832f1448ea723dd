package perf

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/snorkel-net/snorkel/lab"
	"github.com/snorkel-net/snorkel/lab/topo"
)

// strongSwan's IKE daemon with its userspace ESP data plane: the
// kernel-libipsec plugin moves ESP through a TUN device, ipsec0, and routes
// the remote traffic selectors into it in table 220. This kernel may have
// no XFRM crypto at all, and the plugin needs none.
const (
	charonBin      = "/usr/lib/ipsec/charon"
	libipsecPlugin = "/usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so"
	libipsecDev    = "ipsec0"
	// strongSwanESP is the CHILD_SA's suite: AES-GCM-256, as Snorkel's
	// esp transport uses by default.
	strongSwanESP = "aes256gcm16"
	swanConnName  = "bench"
)

// StrongSwanSetup returns the setup of strongSwan's charon in each gateway
// node of a lab with kernel routing, joined by IKEv2 with a pre-shared key
// and carrying the pods' traffic in ESP in UDP through kernel-libipsec.
func StrongSwanSetup() Setup {
	return Setup{
		Name: BaselineStrongSwan,
		Tag:  "ss",
		Kind: KindBaseline,
		Check: func() error {
			for _, f := range []string{charonBin, libipsecPlugin} {
				if _, err := os.Stat(f); err != nil {
					return fmt.Errorf("strongSwan's charon with kernel-libipsec is not installed (%w); apt-get install strongswan-charon strongswan-swanctl libcharon-extra-plugins libstrongswan-standard-plugins", err)
				}
			}
			if _, err := exec.LookPath("swanctl"); err != nil {
				return fmt.Errorf("swanctl is not installed (%w); apt-get install strongswan-swanctl", err)
			}
			return nil
		},
		Up: func(ctx context.Context, env Env) (System, error) {
			s, err := upLab(ctx, env, lab.Basic(), lab.TransportKernel, SystemInfo{
				Name:      BaselineStrongSwan,
				Kind:      KindBaseline,
				Transport: "esp",
				Description: fmt.Sprintf("strongSwan charon in each gateway node, IKEv2 with a pre-shared key, ESP %s in UDP through its userspace data plane (kernel-libipsec, TUN device %s), MSS clamped by nftables",
					strongSwanESP, libipsecDev),
				Version: binaryVersion(ctx, charonBin, "--version"),
			})
			if err != nil {
				return nil, err
			}
			sw := &strongSwanSystem{labSystem: s}
			if err := sw.start(ctx, env); err != nil {
				return nil, errors.Join(err, sw.Close())
			}
			s.tunnel = s.gatewayProcesses("charon-")
			s.info.TunnelMTU = s.gatewayLinkMTU(ctx, libipsecDev)
			return sw, nil
		},
	}
}

// strongSwanSystem is a lab with a charon in each gateway node. Charon's
// files live outside /run, which each charon's mount namespace replaces.
type strongSwanSystem struct {
	*labSystem
	dir string
}

func (s *strongSwanSystem) Close() error {
	err := s.labSystem.Close()
	if s.dir != "" {
		os.RemoveAll(s.dir)
	}
	return err
}

// start runs a charon per gateway node, loads the connection into both,
// has the first cluster's initiate, and clamps the MSS on ipsec0.
func (s *strongSwanSystem) start(ctx context.Context, env Env) error {
	plan := s.lab.Plan
	if len(plan.Clusters) != 2 {
		return fmt.Errorf("perf: the strongSwan baseline joins two clusters, the scenario has %d", len(plan.Clusters))
	}
	dir, err := os.MkdirTemp("", "snorkel-bench-strongswan-")
	if err != nil {
		return fmt.Errorf("perf: %w", err)
	}
	s.dir = dir
	var key [32]byte
	rand.Read(key[:])
	psk := hex.EncodeToString(key[:])
	charons := make([]*charonNode, len(plan.Clusters))
	for i := range plan.Clusters {
		c, peer := &plan.Clusters[i], &plan.Clusters[1-i]
		ns, err := s.lab.Gateway(c.Spec.ID)
		if err != nil {
			return err
		}
		cn := &charonNode{dir: filepath.Join(dir, c.Spec.ID), ns: ns}
		if err := cn.start(ctx, c.Spec.ID); err != nil {
			return err
		}
		if err := cn.load(ctx, c, peer, psk); err != nil {
			return err
		}
		charons[i] = cn
	}
	out, err := charons[0].swanctl(ctx, "--initiate", "--child", swanConnName, "--timeout", "20")
	if err != nil || !strings.Contains(out, "initiate completed successfully") {
		return fmt.Errorf("perf: strongSwan CHILD_SA between %s and %s: %v\n%s\ncharon's log (tail):\n%s", plan.Clusters[0].Spec.ID, plan.Clusters[1].Spec.ID, err, out, charons[0].logTail(20))
	}
	for i, cn := range charons {
		if err := cn.ns.Nft(ctx, mssClampRuleset(libipsecDev)); err != nil {
			return err
		}
		fmt.Fprintf(env.Progress, "  %s: charon (pid %d), ESP %s to %s\n", plan.Clusters[i].Spec.ID, cn.proc.PID, strongSwanESP, plan.Clusters[1-i].Spec.ID)
	}
	return nil
}

// charonNode is one charon, in a gateway node's namespace.
type charonNode struct {
	dir  string
	ns   *topo.NS
	proc *topo.Process
}

func (c *charonNode) conf() string { return filepath.Join(c.dir, "strongswan.conf") }
func (c *charonNode) vici() string { return filepath.Join(c.dir, "charon.vici") }
func (c *charonNode) log() string  { return filepath.Join(c.dir, "charon.log") }

// start writes charon's config and starts it in a mount namespace of its
// own, where a private directory replaces /run: charon's pid file path is
// fixed, and two charons on one host would otherwise collide on it.
func (c *charonNode) start(ctx context.Context, cluster string) error {
	run := filepath.Join(c.dir, "run")
	if err := os.MkdirAll(run, 0o700); err != nil {
		return fmt.Errorf("perf: %w", err)
	}
	if err := os.WriteFile(c.conf(), []byte(c.strongswanConf()), 0o600); err != nil {
		return fmt.Errorf("perf: %w", err)
	}
	// env, unshare and sh each exec the next, so that the process started
	// is charon itself, stopped by its PID with the lab.
	p, err := c.ns.Start("charon-"+cluster, "env", "STRONGSWAN_CONF="+c.conf(),
		"unshare", "--mount", "--propagation", "private",
		"sh", "-c", `mount --bind "$1" /run && exec "$2"`, "sh", run, charonBin)
	if err != nil {
		return err
	}
	c.proc = p
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(c.vici()); err == nil {
			return nil
		}
		if !p.Alive() {
			out, _ := os.ReadFile(p.Log)
			return fmt.Errorf("perf: charon in %s exited: %v: %s", c.ns, p.ExitError(), strings.TrimSpace(string(out)))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("perf: charon in %s created no vici socket %s within 10s; log %s", c.ns, c.vici(), c.log())
		}
		if err := sleep(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// strongswanConf loads only what PSK authentication, AES-GCM, X25519 and
// the userspace data plane need.
func (c *charonNode) strongswanConf() string {
	return fmt.Sprintf(`charon {
	load_modular = no
	load = random nonce openssl aes sha1 sha2 hmac gcm kdf curve25519 pem pkcs1 x509 pubkey kernel-libipsec kernel-netlink socket-default vici
	port = 500
	port_nat_t = 4500
	install_virtual_ip = no
	syslog {
		daemon {
			default = -1
		}
		auth {
			default = -1
		}
	}
	filelog {
		log {
			path = %s
			time_format = %%T
			flush_line = yes
			default = 1
		}
	}
	plugins {
		vici {
			socket = unix://%s
		}
	}
}
swanctl {
	load = pem pkcs1 x509 pubkey openssl random
}
`, c.log(), c.vici())
}

// load gives charon the connection to the peer cluster's gateway node:
// tunnel mode between the two pod CIDRs, ESP always in UDP.
func (c *charonNode) load(ctx context.Context, self, peer *lab.ClusterPlan, psk string) error {
	conf := fmt.Sprintf(`connections {
	%[1]s {
		version = 2
		local_addrs = %[2]s
		remote_addrs = %[3]s
		encap = yes
		proposals = aes256gcm16-prfsha256-x25519
		local {
			auth = psk
			id = @%[4]s
		}
		remote {
			auth = psk
			id = @%[5]s
		}
		children {
			%[1]s {
				local_ts = %[6]s
				remote_ts = %[7]s
				mode = tunnel
				esp_proposals = %[8]s
				start_action = none
			}
		}
	}
}
secrets {
	ike-%[1]s {
		id-a = @%[4]s
		id-b = @%[5]s
		secret = 0x%[9]s
	}
}
`, swanConnName, self.Gateway.UnderlayIP.Addr(), peer.Gateway.UnderlayIP.Addr(), self.Spec.ID, peer.Spec.ID,
		self.Spec.PodCIDR, peer.Spec.PodCIDR, strongSwanESP, psk)
	path := filepath.Join(c.dir, "swanctl.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		return fmt.Errorf("perf: %w", err)
	}
	if out, err := c.swanctl(ctx, "--load-all", "--noprompt", "--file", path); err != nil {
		return fmt.Errorf("%w\n%s", err, out)
	}
	return nil
}

// swanctl runs swanctl against this charon.
func (c *charonNode) swanctl(ctx context.Context, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, "swanctl", append(args, "--uri", "unix://"+c.vici())...)
	cmd.Env = append(os.Environ(), "STRONGSWAN_CONF="+c.conf())
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("perf: swanctl %s for charon in %s: %w", strings.Join(args, " "), c.ns, err)
	}
	return string(out), nil
}

// logTail returns the last n lines of charon's log.
func (c *charonNode) logTail(n int) string {
	b, err := os.ReadFile(c.log())
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
