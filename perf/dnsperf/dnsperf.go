// Package dnsperf compares dnsd with CoreDNS under dnsperf: dnsd (a
// `snorkel dnsd` process serving a static state of N ClusterSetIP
// services) and CoreDNS (its file plugin serving a zone with the same
// names and answers) run side by side on loopback, and dnsperf sends both
// the same query file in interleaved repetitions.
//
// Each repetition has a throughput run per server (dnsperf at full speed:
// queries per second, average latency, and the server's CPU time per
// query) and, after them, a latency run per server (`dnsperf -v` at a fixed
// rate, half the slower server's throughput unless set: p50, p99 and p99.9
// from the per-query latencies dnsperf prints; dnsperf itself prints no
// percentiles, and at full speed its -v output would slow it down).
package dnsperf

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/miekg/dns"

	"github.com/snorkel-net/snorkel/dnsd"
)

// Options configures Run.
type Options struct {
	// Services is how many services the zone holds; default 1000.
	Services int
	// Reps is how many interleaved repetitions; default 3.
	Reps int
	// Duration of each throughput run; default 10s.
	Duration time.Duration
	// LatencyDuration of each latency run; default 5s.
	LatencyDuration time.Duration
	// LatencyQPS is the latency runs' rate; 0 means half the slower
	// server's median throughput.
	LatencyQPS int
	// Clients and Outstanding are dnsperf's -c and -q; default 4 and 100.
	Clients, Outstanding int
	// Snorkel is the snorkel binary run as dnsd; CoreDNS the coredns
	// binary; Dnsperf the dnsperf binary (default "dnsperf").
	Snorkel, CoreDNS, Dnsperf string
	// Dir receives the state, zone and query files, the servers' logs,
	// dnsperf's raw output, results.json and report.md.
	Dir string
	// Progress receives a line per step; nil discards them.
	Progress io.Writer
}

func (o *Options) defaults() error {
	o.Services = cmp.Or(o.Services, 1000)
	o.Reps = cmp.Or(o.Reps, 3)
	o.Duration = cmp.Or(o.Duration, 10*time.Second)
	o.LatencyDuration = cmp.Or(o.LatencyDuration, 5*time.Second)
	o.Clients = cmp.Or(o.Clients, 4)
	o.Outstanding = cmp.Or(o.Outstanding, 100)
	o.Dnsperf = cmp.Or(o.Dnsperf, "dnsperf")
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	var errs []error
	if o.Services < 1 || o.Services > 60000 {
		errs = append(errs, fmt.Errorf("--services %d: use 1 to 60000", o.Services))
	}
	if o.Reps < 1 {
		errs = append(errs, fmt.Errorf("--reps %d: use at least 1", o.Reps))
	}
	if o.Duration < time.Second || o.LatencyDuration < time.Second {
		errs = append(errs, errors.New("--duration and --latency-duration: use at least 1s"))
	}
	if o.Snorkel == "" || o.CoreDNS == "" || o.Dir == "" {
		errs = append(errs, errors.New("dnsperf: Options.Snorkel, CoreDNS and Dir are required"))
	}
	return errors.Join(errs...)
}

// Systems measured, in the order of the first repetition.
const (
	SystemDNSD    = "dnsd"
	SystemCoreDNS = "coredns"
)

// ThroughputRun is one run at full speed.
type ThroughputRun struct {
	System string `json:"system"`
	Rep    int    `json:"rep"`
	Stats  Stats  `json:"stats"`
	// CPU is the server process's CPU time (user and system) during the
	// run.
	CPU time.Duration `json:"cpu"`
}

// LatencyRun is one latency run at a fixed rate.
type LatencyRun struct {
	System   string        `json:"system"`
	Rep      int           `json:"rep"`
	QPS      int           `json:"qps"`
	Answered int           `json:"answered"`
	Lost     int           `json:"lost"`
	P50      time.Duration `json:"p50"`
	P99      time.Duration `json:"p99"`
	P999     time.Duration `json:"p999"`
}

// Summary is one system over the repetitions: medians, and the range of
// the throughput.
type Summary struct {
	System         string        `json:"system"`
	QPS            float64       `json:"qps"`
	MinQPS         float64       `json:"minQPS"`
	MaxQPS         float64       `json:"maxQPS"`
	AvgLatency     time.Duration `json:"avgLatency"`
	CPUPerKQuery   time.Duration `json:"cpuPer1000Queries"`
	LatencyQPS     int           `json:"latencyQPS"`
	P50, P99, P999 time.Duration
	Lost           int `json:"lost"`
}

// Report is a whole comparison.
type Report struct {
	Started    time.Time       `json:"started"`
	Options    Options         `json:"options"`
	Host       string          `json:"host"`
	Throughput []ThroughputRun `json:"throughput"`
	Latency    []LatencyRun    `json:"latency"`
	Summary    []Summary       `json:"summary"`
}

// server is a running DNS server process.
type server struct {
	name string
	addr string // 127.0.0.1:port
	cmd  *exec.Cmd
	log  string
}

func (s *server) stop() {
	if s.cmd.Process != nil {
		s.cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { s.cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			s.cmd.Process.Kill()
			<-done
		}
	}
}

// cpu is the process's CPU time so far, from /proc.
func (s *server) cpu() (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", s.cmd.Process.Pid))
	if err != nil {
		return 0, err
	}
	// The command name may hold spaces: fields count from after its ')'.
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: too short", s.cmd.Process.Pid)
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	// Linux counts in USER_HZ, 100 a second on every architecture Go
	// supports.
	return time.Duration(u+k) * 10 * time.Millisecond, nil
}

// Run runs the comparison and writes its files to o.Dir.
func Run(ctx context.Context, o Options) (*Report, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if _, err := exec.LookPath(o.Dnsperf); err != nil {
		return nil, fmt.Errorf("dnsperf is not installed (Debian: apt-get install dnsperf): %w", err)
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	host, _ := os.Hostname()
	rep := &Report{Started: time.Now().UTC(), Options: o, Host: host}
	st, names := benchState(o.Services)
	queries := filepath.Join(o.Dir, "queries.txt")
	if err := os.WriteFile(queries, queryFile(names), 0o644); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Progress, "dnsperf: %d services, %d queries in %s (one in ten for a missing name)\n", o.Services, len(names)*11/10, queries)

	d, err := startDNSD(ctx, o, st)
	if err != nil {
		return nil, err
	}
	defer d.stop()
	c, err := startCoreDNS(ctx, o, st)
	if err != nil {
		return nil, err
	}
	defer c.stop()
	if err := sameAnswers(d, c, names); err != nil {
		return nil, err
	}
	servers := []*server{d, c}

	for r := 1; r <= o.Reps; r++ {
		for _, s := range order(servers, r) {
			run, err := throughput(ctx, o, s, r, queries)
			if err != nil {
				return nil, err
			}
			rep.Throughput = append(rep.Throughput, run)
			fmt.Fprintf(o.Progress, "  rep %d %-8s %9.0f qps  avg %v  lost %d  CPU %v\n", r, s.name, run.Stats.QPS, run.Stats.AvgLatency, run.Stats.Lost, run.CPU)
		}
	}
	qps := o.LatencyQPS
	if qps == 0 {
		slowest := math.Inf(1)
		for _, s := range servers {
			slowest = min(slowest, median(qpsOf(rep.Throughput, s.name)))
		}
		qps = max(100, int(slowest/2))
	}
	for r := 1; r <= o.Reps; r++ {
		for _, s := range order(servers, r) {
			lr, err := latency(ctx, o, s, r, qps, queries)
			if err != nil {
				return nil, err
			}
			rep.Latency = append(rep.Latency, lr)
			fmt.Fprintf(o.Progress, "  rep %d %-8s at %d qps: p50 %v  p99 %v  p99.9 %v  lost %d\n", r, s.name, qps, lr.P50, lr.P99, lr.P999, lr.Lost)
		}
	}
	for _, s := range servers {
		rep.Summary = append(rep.Summary, summarize(rep, s.name, qps))
	}
	if err := rep.write(o.Dir); err != nil {
		return nil, err
	}
	return rep, nil
}

// order alternates which server goes first, so that neither always runs
// on a machine the other has just warmed or loaded.
func order(servers []*server, rep int) []*server {
	if rep%2 == 0 {
		return []*server{servers[1], servers[0]}
	}
	return servers
}

// benchState is N ClusterSetIP services in namespace bench, each exported
// by one connected cluster with a ready backend, and their names.
func benchState(n int) (dnsd.State, []string) {
	st := dnsd.State{LocalCluster: "c1", Connected: []string{"c2"}}
	names := make([]string, 0, n)
	for i := range n {
		name := fmt.Sprintf("svc-%d", i)
		ip := netip.AddrFrom4([4]byte{10, 100, byte(i >> 8), byte(i)})
		st.Services = append(st.Services, dnsd.Service{
			Namespace: "bench", Name: name,
			Ports:   []dnsd.Port{{Name: "http", Protocol: "TCP", Port: 80}},
			Exports: []dnsd.Export{{Cluster: "c2", IPs: []netip.Addr{ip}, Ready: true}},
		})
		names = append(names, name+".bench.svc.clusterset.local.")
	}
	return st, names
}

// queryFile lists every name once for A, shuffled, with a missing name
// after every ten (the NXDOMAIN a resolver's search path causes).
func queryFile(names []string) []byte {
	rng := rand.New(rand.NewPCG(1, 1))
	shuffled := slices.Clone(names)
	rng.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	var b bytes.Buffer
	for i, n := range shuffled {
		fmt.Fprintf(&b, "%s A\n", n)
		if i%10 == 9 {
			fmt.Fprintf(&b, "missing-%d.bench.svc.clusterset.local. A\n", i)
		}
	}
	return b.Bytes()
}

// zoneFile is the zone CoreDNS's file plugin serves: the same names and
// addresses, TTL and negative TTL as dnsd's.
func zoneFile(st dnsd.State) []byte {
	var b bytes.Buffer
	b.WriteString("$ORIGIN clusterset.local.\n")
	b.WriteString("@ 5 IN SOA ns.dns.clusterset.local. hostmaster.clusterset.local. 1 7200 1800 86400 5\n")
	b.WriteString("@ 5 IN NS ns.dns.clusterset.local.\n")
	b.WriteString("ns.dns 5 IN A 127.0.0.1\n")
	for _, s := range st.Services {
		fmt.Fprintf(&b, "%s.%s.svc 5 IN A %s\n", s.Name, s.Namespace, s.Exports[0].IPs[0])
	}
	return b.Bytes()
}

func freePort() (int, error) {
	for range 20 {
		pc, err := net.ListenPacket("udp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		port := pc.LocalAddr().(*net.UDPAddr).Port
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", port))
		pc.Close()
		if err == nil {
			ln.Close()
			return port, nil
		}
	}
	return 0, errors.New("dnsperf: no loopback port free for UDP and TCP")
}

func startDNSD(ctx context.Context, o Options, st dnsd.State) (*server, error) {
	b, err := dnsd.EncodeState(st)
	if err != nil {
		return nil, err
	}
	file := filepath.Join(o.Dir, "dnsd-state.json")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	return start(ctx, o, SystemDNSD, addr, o.Snorkel, "dnsd", "--static", file, "--listen", addr)
}

func startCoreDNS(ctx context.Context, o Options, st dnsd.State) (*server, error) {
	zone := filepath.Join(o.Dir, "clusterset.local.zone")
	if err := os.WriteFile(zone, zoneFile(st), 0o644); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	conf := filepath.Join(o.Dir, "Corefile")
	corefile := fmt.Sprintf("clusterset.local:%d {\n    bind 127.0.0.1\n    file %s\n}\n", port, zone)
	if err := os.WriteFile(conf, []byte(corefile), 0o644); err != nil {
		return nil, err
	}
	return start(ctx, o, SystemCoreDNS, fmt.Sprintf("127.0.0.1:%d", port), o.CoreDNS, "-conf", conf)
}

// start runs a server and waits until it answers.
func start(ctx context.Context, o Options, name, addr, bin string, args ...string) (*server, error) {
	s := &server{name: name, addr: addr, log: filepath.Join(o.Dir, name+".log")}
	logf, err := os.Create(s.log)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	s.cmd = exec.Command(bin, args...)
	s.cmd.Stdout, s.cmd.Stderr = logf, logf
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("dnsperf: start %s: %w", name, err)
	}
	fmt.Fprintf(o.Progress, "  %s: pid %d on %s (%s %s)\n", name, s.cmd.Process.Pid, addr, bin, strings.Join(args, " "))
	r := new(dns.Msg)
	r.SetQuestion("svc-0.bench.svc.clusterset.local.", dns.TypeA)
	c := &dns.Client{Timeout: 500 * time.Millisecond}
	deadline := time.Now().Add(20 * time.Second)
	for {
		m, _, err := c.Exchange(r, addr)
		if err == nil && len(m.Answer) == 1 {
			return s, nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.stop()
			b, _ := os.ReadFile(s.log)
			return nil, fmt.Errorf("dnsperf: %s does not answer on %s (%v %v); its log:\n%s", name, addr, m, err, tail(string(b), 10))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// sameAnswers checks that both servers give the same answers to a
// sample of the names and to a missing one: the comparison is fair only
// if they do the same work.
func sameAnswers(a, b *server, names []string) error {
	c := &dns.Client{Timeout: 2 * time.Second}
	sample := append(slices.Clone(names[:min(len(names), 20)]), "missing.bench.svc.clusterset.local.")
	for _, n := range sample {
		var got [2]string
		for i, s := range []*server{a, b} {
			r := new(dns.Msg)
			r.SetQuestion(n, dns.TypeA)
			m, _, err := c.Exchange(r, s.addr)
			if err != nil {
				return fmt.Errorf("dnsperf: %s: %s: %w", s.name, n, err)
			}
			var rrs []string
			for _, rr := range m.Answer {
				rrs = append(rrs, rr.String())
			}
			got[i] = dns.RcodeToString[m.Rcode] + " " + strings.Join(rrs, "; ")
		}
		if got[0] != got[1] {
			return fmt.Errorf("dnsperf: %s and %s answer %s differently: %q and %q", a.name, b.name, n, got[0], got[1])
		}
	}
	return nil
}

func dnsperfArgs(o Options, s *server, queries string) []string {
	host, port, _ := net.SplitHostPort(s.addr)
	return []string{"-s", host, "-p", port, "-d", queries, "-c", strconv.Itoa(o.Clients), "-q", strconv.Itoa(o.Outstanding)}
}

func throughput(ctx context.Context, o Options, s *server, rep int, queries string) (ThroughputRun, error) {
	args := append(dnsperfArgs(o, s, queries), "-l", strconv.Itoa(int(o.Duration/time.Second)))
	before, err := s.cpu()
	if err != nil {
		return ThroughputRun{}, fmt.Errorf("dnsperf: %s exited? %w", s.name, err)
	}
	out, err := exec.CommandContext(ctx, o.Dnsperf, args...).CombinedOutput()
	after, cerr := s.cpu()
	raw := filepath.Join(o.Dir, fmt.Sprintf("dnsperf-%s-rep%d.txt", s.name, rep))
	os.WriteFile(raw, out, 0o644)
	if err != nil {
		return ThroughputRun{}, fmt.Errorf("dnsperf %s: %w\n%s", strings.Join(args, " "), err, tail(string(out), 10))
	}
	if cerr != nil {
		return ThroughputRun{}, fmt.Errorf("dnsperf: %s exited during the run: %w", s.name, cerr)
	}
	st, err := ParseStats(string(out))
	if err != nil {
		return ThroughputRun{}, err
	}
	return ThroughputRun{System: s.name, Rep: rep, Stats: st, CPU: after - before}, nil
}

func latency(ctx context.Context, o Options, s *server, rep, qps int, queries string) (LatencyRun, error) {
	args := append(dnsperfArgs(o, s, queries), "-v", "-Q", strconv.Itoa(qps), "-l", strconv.Itoa(int(o.LatencyDuration/time.Second)))
	raw, err := os.Create(filepath.Join(o.Dir, fmt.Sprintf("dnsperf-%s-latency-rep%d.txt", s.name, rep)))
	if err != nil {
		return LatencyRun{}, err
	}
	defer raw.Close()
	cmd := exec.CommandContext(ctx, o.Dnsperf, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		return LatencyRun{}, err
	}
	cmd.Stderr = raw
	if err := cmd.Start(); err != nil {
		return LatencyRun{}, err
	}
	l, perr := ParseVerbose(io.TeeReader(out, raw))
	if err := cmd.Wait(); err != nil {
		return LatencyRun{}, fmt.Errorf("dnsperf %s: %w (output in %s)", strings.Join(args, " "), err, raw.Name())
	}
	if perr != nil {
		return LatencyRun{}, perr
	}
	slices.Sort(l.Each)
	return LatencyRun{
		System: s.name, Rep: rep, QPS: qps, Answered: len(l.Each), Lost: l.Lost,
		P50: percentile(l.Each, 50), P99: percentile(l.Each, 99), P999: percentile(l.Each, 99.9),
	}, nil
}

// percentile is the nearest-rank percentile of sorted durations.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	// The epsilon keeps 99.9% of 1000 at rank 999, not 1000 by rounding.
	i := int(math.Ceil(p/100*float64(len(sorted))-1e-9)) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func qpsOf(runs []ThroughputRun, system string) []float64 {
	var out []float64
	for _, r := range runs {
		if r.System == system {
			out = append(out, r.Stats.QPS)
		}
	}
	return out
}

func median[T cmp.Ordered](v []T) T {
	var zero T
	if len(v) == 0 {
		return zero
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func summarize(rep *Report, system string, qps int) Summary {
	s := Summary{System: system, LatencyQPS: qps}
	var q []float64
	var avg, cpu []time.Duration
	for _, r := range rep.Throughput {
		if r.System != system {
			continue
		}
		q = append(q, r.Stats.QPS)
		avg = append(avg, r.Stats.AvgLatency)
		if r.Stats.Completed > 0 {
			cpu = append(cpu, r.CPU*1000/time.Duration(r.Stats.Completed))
		}
		s.Lost += r.Stats.Lost
	}
	s.QPS, s.MinQPS, s.MaxQPS = median(q), slices.Min(q), slices.Max(q)
	s.AvgLatency, s.CPUPerKQuery = median(avg), median(cpu)
	var p50, p99, p999 []time.Duration
	for _, l := range rep.Latency {
		if l.System == system {
			p50, p99, p999 = append(p50, l.P50), append(p99, l.P99), append(p999, l.P999)
			s.Lost += l.Lost
		}
	}
	s.P50, s.P99, s.P999 = median(p50), median(p99), median(p999)
	return s
}

func (rep *Report) write(dir string) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(rep.Markdown()), 0o644)
}

// Markdown is the report: a table of the systems and the ratios.
func (rep *Report) Markdown() string {
	var b strings.Builder
	o := rep.Options
	fmt.Fprintf(&b, "dnsd against CoreDNS (file plugin), %d services, %d interleaved repetitions; throughput: dnsperf -c %d -q %d for %s; latency: dnsperf -v at a fixed rate for %s.\n\n",
		o.Services, o.Reps, o.Clients, o.Outstanding, o.Duration, o.LatencyDuration)
	b.WriteString("| system | median qps | min | max | avg latency | CPU per 1000 queries | latency run rate | p50 | p99 | p99.9 | lost |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, s := range rep.Summary {
		fmt.Fprintf(&b, "| %s | %.0f | %.0f | %.0f | %v | %v | %d qps | %v | %v | %v | %d |\n",
			s.System, s.QPS, s.MinQPS, s.MaxQPS, s.AvgLatency.Round(time.Microsecond), s.CPUPerKQuery.Round(time.Microsecond),
			s.LatencyQPS, s.P50.Round(time.Microsecond), s.P99.Round(time.Microsecond), s.P999.Round(time.Microsecond), s.Lost)
	}
	if d, c, ok := rep.pair(); ok && c.QPS > 0 && c.P99 > 0 {
		fmt.Fprintf(&b, "\ndnsd/CoreDNS: %.2f× the queries per second (target ≥ 1.0×), p99 %v against %v (%.2f×), %.2f× the CPU per query.\n",
			d.QPS/c.QPS, d.P99.Round(time.Microsecond), c.P99.Round(time.Microsecond), float64(d.P99)/float64(c.P99),
			float64(d.CPUPerKQuery)/math.Max(float64(c.CPUPerKQuery), 1))
	}
	return b.String()
}

func (rep *Report) pair() (d, c Summary, ok bool) {
	var found int
	for _, s := range rep.Summary {
		switch s.System {
		case SystemDNSD:
			d, found = s, found+1
		case SystemCoreDNS:
			c, found = s, found+1
		}
	}
	return d, c, found == 2
}
