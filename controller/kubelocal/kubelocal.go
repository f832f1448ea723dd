// Package kubelocal runs real Kubernetes API servers on loopback: each Server
// is one cluster, with its own etcd (from the system) and its own
// kube-apiserver (built by `make tools`), an admin token and a kubeconfig
// context. The control-plane tests and `snorkel lab --kube` use several of
// them as a broker and its member clusters.
// Tests start them through package kubetest, which keeps package testing
// out of the snorkel binary that links this one for the lab.
//
// Only the API server runs: no controller manager, scheduler or kubelet.
// Whoever needs their work done (a namespace's default ServiceAccount, an
// EndpointSlice, a pod's status) writes it, and nothing garbage-collects
// by owner reference or finishes a namespace's deletion.
package kubelocal

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Options configures a Server. Zero fields take the defaults.
type Options struct {
	// Name names the cluster and its kubeconfig context.
	Name string
	// Dir holds the server's state (etcd data, certificates, logs);
	// default a new directory under /dev/shm, or the system's temporary
	// directory.
	Dir string
	// ServiceCIDR is the range ClusterIPs are allocated from; default
	// 10.96.0.0/16.
	ServiceCIDR string
	// Address is the IP address the API server listens on and its
	// certificate names; default 127.0.0.1. etcd always listens on
	// 127.0.0.1.
	Address string
	// Spawn starts etcd and the API server; default child processes of
	// this one, killed when it dies. A lab that outlives its command
	// starts them in a network namespace, recorded for its teardown.
	Spawn func(name, bin string, args ...string) (Process, error)
	// Dial, if set, makes every connection to the API server, from
	// Start's readiness checks and from clients of Config.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error)
}

// Process is a started etcd or API server.
type Process interface {
	// Exited is closed when the process has ended; nil if it cannot be
	// waited for.
	Exited() <-chan struct{}
	// Stop ends the process: politely, then by force after timeout.
	Stop(timeout time.Duration) error
}

// Server is one running cluster's API server and its etcd.
type Server struct {
	Name string
	// URL is the API server's address, https://127.0.0.1:port.
	URL string
	// Token is the bearer token of the admin user (group system:masters).
	Token string
	// CA is the PEM certificate the server's certificate is signed by.
	CA []byte
	// Kubeconfig is a file with one context, Name, as the admin user.
	Kubeconfig string

	dir     string
	ownDir  bool
	dial    func(ctx context.Context, network, addr string) (net.Conn, error)
	spawner func(name, bin string, args ...string) (Process, error)
	etcd    Process
	api     Process
	stopped chan struct{}
}

// proc is a child process and a channel closed when it has exited.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

func (p *proc) Exited() <-chan struct{} { return p.exited }

func (p *proc) Stop(timeout time.Duration) error {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(timeout):
		p.cmd.Process.Kill()
		<-p.exited
	}
	return nil
}

// exited reports whether p has ended, as far as can be told.
func exited(p Process) bool {
	select {
	case <-p.Exited():
		return true
	default:
		return false
	}
}

// Binaries: the environment names them, or the defaults are searched.
const (
	envAPIServer = "SNORKEL_KUBE_APISERVER"
	envEtcd      = "SNORKEL_ETCD"
)

// Start starts etcd and kube-apiserver for one cluster and waits until the
// API server is ready. Stop ends both.
func Start(ctx context.Context, o Options) (*Server, error) {
	if o.Name == "" {
		return nil, errors.New("kubelocal: Options.Name is required")
	}
	if o.ServiceCIDR == "" {
		o.ServiceCIDR = "10.96.0.0/16"
	}
	apiBin, err := findAPIServer()
	if err != nil {
		return nil, err
	}
	etcdBin := os.Getenv(envEtcd)
	if etcdBin == "" {
		if etcdBin, err = exec.LookPath("etcd"); err != nil {
			return nil, errors.New("kubelocal: etcd not found: install Debian's etcd-server, or set " + envEtcd)
		}
	}
	if o.Address == "" {
		o.Address = "127.0.0.1"
	}
	addr := net.ParseIP(o.Address)
	if addr == nil {
		return nil, fmt.Errorf("kubelocal: Options.Address %q is not an IP address", o.Address)
	}
	s := &Server{Name: o.Name, dir: o.Dir, dial: o.Dial, spawner: o.Spawn, stopped: make(chan struct{})}
	if s.dir == "" {
		base := "/dev/shm"
		if st, err := os.Stat(base); err != nil || !st.IsDir() {
			base = os.TempDir()
		}
		if s.dir, err = os.MkdirTemp(base, "kubelocal-"+o.Name+"-"); err != nil {
			return nil, fmt.Errorf("kubelocal: %w", err)
		}
		s.ownDir = true
	} else if err := os.MkdirAll(s.dir, 0o700); err != nil {
		return nil, fmt.Errorf("kubelocal: Options.Dir: %w", err)
	}
	ok := false
	defer func() {
		if !ok {
			s.Stop()
		}
	}()
	serviceIP, err := firstServiceIP(o.ServiceCIDR)
	if err != nil {
		return nil, err
	}
	if err := s.writeCredentials(addr, serviceIP); err != nil {
		return nil, err
	}
	for attempt := 1; ; attempt++ {
		err := s.launch(ctx, o, apiBin, etcdBin)
		if err == nil {
			break
		}
		if attempt == launchAttempts || !s.portTaken() {
			return nil, err
		}
		s.stopProcesses()
		if err := os.RemoveAll(filepath.Join(s.dir, "etcd")); err != nil {
			return nil, fmt.Errorf("kubelocal: %w", err)
		}
	}
	if err := s.writeKubeconfig(); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// launchAttempts bounds the tries at starting etcd and the API server on
// fresh ports: a port found free can be taken by another process before
// the server binds it.
const launchAttempts = 3

// launch starts etcd and kube-apiserver on free ports and waits until the
// API server is ready.
func (s *Server) launch(ctx context.Context, o Options, apiBin, etcdBin string) error {
	ports, err := freePorts(3)
	if err != nil {
		return err
	}
	etcdURL := "http://127.0.0.1:" + strconv.Itoa(ports[0])
	peerURL := "http://127.0.0.1:" + strconv.Itoa(ports[1])
	s.etcd, err = s.spawn("etcd", etcdBin,
		"--name", "default",
		"--data-dir", filepath.Join(s.dir, "etcd"),
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL,
		"--listen-peer-urls", peerURL, "--initial-advertise-peer-urls", peerURL,
		"--initial-cluster", "default="+peerURL,
		"--log-level", "warn")
	if err != nil {
		return err
	}
	s.URL = "https://" + net.JoinHostPort(o.Address, strconv.Itoa(ports[2]))
	s.api, err = s.spawn("apiserver", apiBin,
		"--etcd-servers", etcdURL,
		"--bind-address", o.Address, "--advertise-address", o.Address,
		"--endpoint-reconciler-type", endpointReconciler(o.Address),
		// Logs and exec reach a kubelet by the node's InternalIP: its name
		// would be looked up through the host's resolver.
		"--kubelet-preferred-address-types", "InternalIP",
		"--secure-port", strconv.Itoa(ports[2]),
		"--tls-cert-file", filepath.Join(s.dir, "serving.crt"),
		"--tls-private-key-file", filepath.Join(s.dir, "serving.key"),
		"--client-ca-file", filepath.Join(s.dir, "ca.crt"),
		"--service-account-issuer", "https://kubernetes.default.svc",
		"--service-account-key-file", filepath.Join(s.dir, "sa.pub"),
		"--service-account-signing-key-file", filepath.Join(s.dir, "sa.key"),
		"--token-auth-file", filepath.Join(s.dir, "tokens.csv"),
		"--authorization-mode", "RBAC",
		"--service-cluster-ip-range", o.ServiceCIDR,
		"--cert-dir", filepath.Join(s.dir, "certs"),
		"--v", "0")
	if err != nil {
		return err
	}
	return s.waitReady(ctx)
}

// endpointReconciler keeps the kubernetes Service's endpoints, which pods
// reach the API server through, at Address. They may not be a loopback
// address, and nothing in a cluster without nodes needs them.
func endpointReconciler(address string) string {
	if a, err := netip.ParseAddr(address); err == nil && a.IsLoopback() {
		return "none"
	}
	return "lease"
}

// portTaken reports whether etcd or the API server failed because another
// process held its port.
func (s *Server) portTaken() bool {
	for _, name := range []string{"etcd.log", "apiserver.log"} {
		if b, err := os.ReadFile(filepath.Join(s.dir, name)); err == nil && bytes.Contains(b, []byte("address already in use")) {
			return true
		}
	}
	return false
}

// stopProcesses ends the API server and etcd.
func (s *Server) stopProcesses() {
	for _, p := range []Process{s.api, s.etcd} {
		if p != nil {
			p.Stop(10 * time.Second)
		}
	}
}

// findAPIServer returns the kube-apiserver to run: $SNORKEL_KUBE_APISERVER,
// else the newest .cache/bin/kube-apiserver-* of the repository the working
// directory is in, else kube-apiserver on $PATH.
func findAPIServer() (string, error) {
	if p := os.Getenv(envAPIServer); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("kubelocal: %s=%s: %w (run `make tools` to build it)", envAPIServer, p, err)
		}
		return p, nil
	}
	if dir, err := os.Getwd(); err == nil {
		for ; dir != filepath.Dir(dir); dir = filepath.Dir(dir) {
			m, _ := filepath.Glob(filepath.Join(dir, ".cache", "bin", "kube-apiserver-*"))
			if len(m) > 0 {
				return m[len(m)-1], nil
			}
		}
	}
	if p, err := exec.LookPath("kube-apiserver"); err == nil {
		return p, nil
	}
	return "", errors.New("kubelocal: kube-apiserver not found: run `make tools` (it builds .cache/bin/kube-apiserver-<version>), or set " + envAPIServer)
}

// spawn starts the process name (etcd or apiserver), through Options.Spawn
// if set, else as a child logging to name.log in the state directory.
func (s *Server) spawn(name, bin string, args ...string) (Process, error) {
	if s.spawner != nil {
		p, err := s.spawner(s.Name+"-"+name, bin, args...)
		if err != nil {
			return nil, fmt.Errorf("kubelocal: starting %s: %w", bin, err)
		}
		return p, nil
	}
	return startChild(filepath.Join(s.dir, name+".log"), bin, args...)
}

// startChild starts bin as a child process logging to logPath, in its own
// process group and killed when this process dies.
func startChild(logPath, bin string, args ...string) (Process, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, fmt.Errorf("kubelocal: %w", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("kubelocal: starting %s: %w", bin, err)
	}
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	go func() {
		cmd.Wait()
		logf.Close()
		close(p.exited)
	}()
	return p, nil
}

// waitReady polls /readyz until it answers ok.
func (s *Server) waitReady(ctx context.Context) error {
	rc := s.Config()
	tr, err := rest.TransportFor(rc)
	if err != nil {
		return err
	}
	c := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/readyz", nil)
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = resp.Status
		} else {
			last = err.Error()
		}
		if exited(s.api) || exited(s.etcd) {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kubelocal: %s not ready (%s)%s", s.Name, last, s.logTail())
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("kubelocal: %s exited (%s)%s", s.Name, last, s.logTail())
}

// logTail returns the end of both logs, for an error message.
func (s *Server) logTail() string {
	var b strings.Builder
	for _, name := range []string{"etcd.log", "apiserver.log"} {
		data, err := os.ReadFile(filepath.Join(s.dir, name))
		if err != nil {
			continue
		}
		if len(data) > 2000 {
			data = data[len(data)-2000:]
		}
		fmt.Fprintf(&b, "\n--- %s (end) ---\n%s", name, data)
	}
	return b.String()
}

// Config returns a client configuration for the admin user.
func (s *Server) Config() *rest.Config {
	return &rest.Config{
		Host:            s.URL,
		BearerToken:     s.Token,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.CA},
		QPS:             -1, // no client-side rate limit: the tests measure the server
		Dial:            s.dial,
	}
}

// Client returns a clientset for the admin user.
func (s *Server) Client() (kubernetes.Interface, error) { return kubernetes.NewForConfig(s.Config()) }

// Stop ends the API server and etcd, and removes the state directory if
// Start made it. It is safe to call more than once.
func (s *Server) Stop() {
	select {
	case <-s.stopped:
		return
	default:
		close(s.stopped)
	}
	s.stopProcesses()
	if s.ownDir {
		os.RemoveAll(s.dir)
	}
}

// writeCredentials writes a CA and the serving certificate it signs, the
// service-account signing key, and the admin token.
// firstServiceIP is the kubernetes Service's ClusterIP, the first address
// of the Service CIDR, which pods dial the API server at.
func firstServiceIP(cidr string) (net.IP, error) {
	p, err := netip.ParsePrefix(cidr)
	if err != nil || !p.Addr().Is4() {
		return nil, fmt.Errorf("kubelocal: Options.ServiceCIDR %q is not an IPv4 CIDR", cidr)
	}
	return net.IP(p.Masked().Addr().Next().AsSlice()), nil
}

// Dir holds the server's state: ca.crt, which signs the serving
// certificate, and sa.key, the ServiceAccount signing key, are the files a
// kube-controller-manager needs.
func (s *Server) Dir() string { return s.dir }

func (s *Server) writeCredentials(addr, serviceIP net.IP) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kubelocal-ca-" + s.Name},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.IPv4(127, 0, 0, 1), addr, serviceIP},
		DNSNames:     []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	token := make([]byte, 16)
	rand.Read(token)
	s.Token = hex.EncodeToString(token)
	s.CA = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	srvKeyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return err
	}
	saPub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return err
	}
	files := map[string][]byte{
		"ca.crt":      s.CA,
		"serving.crt": pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}),
		"serving.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: srvKeyDER}),
		"sa.key":      pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(saKey)}),
		"sa.pub":      pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub}),
		"tokens.csv":  []byte(s.Token + ",admin,admin,system:masters\n"),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(s.dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func (s *Server) writeKubeconfig() error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[s.Name] = &clientcmdapi.Cluster{Server: s.URL, CertificateAuthorityData: s.CA}
	cfg.AuthInfos[s.Name] = &clientcmdapi.AuthInfo{Token: s.Token}
	cfg.Contexts[s.Name] = &clientcmdapi.Context{Cluster: s.Name, AuthInfo: s.Name}
	cfg.CurrentContext = s.Name
	s.Kubeconfig = filepath.Join(s.dir, "kubeconfig")
	return clientcmd.WriteToFile(*cfg, s.Kubeconfig)
}

// freePorts finds n free TCP ports on loopback below the kernel's
// ephemeral range, where outgoing connections (the tests make thousands)
// never take one between the check and the server's bind. Where the
// range leaves no room below it, the kernel picks.
func freePorts(n int) ([]int, error) {
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	lo := ephemeralLow()
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		port := 0
		if lo > minPort+1000 && tries < 100 {
			port = minPort + mrand.IntN(lo-minPort)
		}
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			if port != 0 {
				continue
			}
			return nil, fmt.Errorf("kubelocal: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// minPort is the lowest port freePorts picks: well above the ports
// system services use.
const minPort = 10000

// ephemeralLow is the first port of the kernel's range for outgoing
// connections; 0 if it cannot be read.
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	lo, _ := strconv.Atoi(f[0])
	return lo
}
