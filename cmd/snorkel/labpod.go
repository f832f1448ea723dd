package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/snorkel-net/snorkel/lab"
)

const labPodUsage = `usage: snorkel lab-pod whereami --name POD --cluster ID [--listen ADDR]
       snorkel lab-pod fetch URL [--expect-cluster ID] [--expect-pod NAME] [--expect-client-in CIDR|IP] [--bytes N] [--timeout D] [--retry-until D]
       snorkel lab-pod resolve NAME [--expect-in CIDR | --expect IP] [--timeout D] [--retry-until D]
       snorkel lab-pod sniff-udp --port P --token T [--timeout D]
       snorkel lab-pod send-udp --from IP --to IP:PORT --token T [--for D]
       snorkel lab-pod ping IP [--count N] [--size BYTES] [--ttl N] [--df]
       snorkel lab-pod route-mtu IP
       snorkel lab-pod path-mtu IP --tcp IP:PORT [--lo BYTES] [--hi BYTES]
       snorkel lab-pod tcp-connect IP:PORT [--count N] [--dial-timeout D]
       snorkel lab-pod stream-server [--listen ADDR]
       snorkel lab-pod stream-probe IP:PORT [--streams N] [--interval D] [--ping-interval D] [--gap D]`

// runLabPod is `snorkel lab-pod`, the programs the labs and snorkel
// verify run inside their pods. It is not meant to be run by hand.
func runLabPod(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) == 0 {
		return errors.New(labPodUsage)
	}
	switch args[0] {
	case "whereami":
		return runWhereami(ctx, args[1:])
	case "fetch":
		return runFetch(ctx, args[1:], http.DefaultClient, os.Stdout)
	case "resolve":
		return runResolve(ctx, args[1:], net.DefaultResolver, os.Stdout)
	case "stream-server":
		return runStreamServer(ctx, args[1:])
	case "stream-probe":
		return runStreamProbe(ctx, args[1:], os.Stdout)
	case "sniff-udp", "send-udp", "ping", "route-mtu", "path-mtu", "tcp-connect":
		return runProbe(ctx, args[0], args[1:], os.Stdout)
	}
	return errors.New(labPodUsage)
}

func runWhereami(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("lab-pod whereami", flag.ContinueOnError)
	name := fs.String("name", "", "pod name to report")
	cluster := fs.String("cluster", "", "cluster ID to report")
	listen := fs.String("listen", ":80", "address to serve HTTP on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *name == "" || *cluster == "" {
		return errors.New("whereami: --name and --cluster are required")
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("whereami: %w", err)
	}
	return lab.Whereami{Pod: *name, Cluster: *cluster}.Serve(ctx, ln)
}

// runFetch is `lab-pod fetch URL`: GET a whereami server and check who
// answered. It prints one line; the error is the reason the check failed.
func runFetch(ctx context.Context, args []string, client *http.Client, out io.Writer) error {
	fs := flag.NewFlagSet("lab-pod fetch", flag.ContinueOnError)
	var f lab.Fetch
	fs.StringVar(&f.Cluster, "expect-cluster", "", "the cluster ID that must answer")
	fs.StringVar(&f.Pod, "expect-pod", "", "the pod that must answer")
	clientIn := fs.String("expect-client-in", "", "CIDR, or one address, the client address the server saw must be in")
	fs.IntVar(&f.Bytes, "bytes", 0, "also fetch this many bytes from the server's /bytes, which must arrive whole")
	fs.DurationVar(&f.Timeout, "timeout", 5*time.Second, "bound of each attempt")
	fs.DurationVar(&f.RetryUntil, "retry-until", 0, "retry failed attempts for this long")
	var urls []string
	if err := parseFlags(fs, args, &urls, out); err != nil {
		return err
	}
	if len(urls) != 1 {
		return fmt.Errorf("fetch: give one URL (got %d)", len(urls))
	}
	f.URL = urls[0]
	if f.Bytes < 0 || f.Bytes > lab.MaxBytes {
		return fmt.Errorf("fetch: --bytes %d: give 0 to %d", f.Bytes, lab.MaxBytes)
	}
	if *clientIn != "" {
		p, err := parsePrefixOrAddr(*clientIn)
		if err != nil {
			return fmt.Errorf("fetch: --expect-client-in: %w", err)
		}
		f.ClientIn = p
	}
	line, err := f.Run(ctx, client)
	if err != nil {
		return fmt.Errorf("fetch: %w", err)
	}
	_, err = fmt.Fprintln(out, line)
	return err
}

// parsePrefixOrAddr reads a CIDR, or an address as the prefix of that
// address alone, so that a pod can pass its own IP ($(POD_IP)).
func parsePrefixOrAddr(s string) (netip.Prefix, error) {
	if a, err := netip.ParseAddr(s); err == nil {
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	return p.Masked(), err
}

// runResolve is `lab-pod resolve NAME`: look NAME up with the pod's
// resolver and check the addresses. It prints one line; the error is the
// reason the check failed.
func runResolve(ctx context.Context, args []string, resolver *net.Resolver, out io.Writer) error {
	fs := flag.NewFlagSet("lab-pod resolve", flag.ContinueOnError)
	var r lab.Resolve
	in := fs.String("expect-in", "", "CIDR every address must be in")
	want := fs.String("expect", "", "an address the name must resolve to")
	fs.DurationVar(&r.Timeout, "timeout", 5*time.Second, "bound of each attempt")
	fs.DurationVar(&r.RetryUntil, "retry-until", 0, "retry failed attempts for this long")
	var names []string
	if err := parseFlags(fs, args, &names, out); err != nil {
		return err
	}
	if len(names) != 1 {
		return fmt.Errorf("resolve: give one name (got %d)", len(names))
	}
	r.Name = names[0]
	var err error
	if *in != "" {
		if r.In, err = netip.ParsePrefix(*in); err != nil {
			return fmt.Errorf("resolve: --expect-in: %w", err)
		}
		r.In = r.In.Masked()
	}
	if *want != "" {
		if r.Want, err = netip.ParseAddr(*want); err != nil {
			return fmt.Errorf("resolve: --expect: %w", err)
		}
	}
	line, err := r.Run(ctx, resolver)
	if err != nil {
		return fmt.Errorf("resolve: %w", err)
	}
	_, err = fmt.Fprintln(out, line)
	return err
}

// runStreamServer is `lab-pod stream-server`: the echo server at the far
// end of stream-probe's streams.
func runStreamServer(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("lab-pod stream-server", flag.ContinueOnError)
	listen := fs.String("listen", ":9000", "address to serve TCP on")
	if err := fs.Parse(args); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *listen)
	if err != nil {
		return fmt.Errorf("stream-server: %w", err)
	}
	return lab.StreamServer(ctx, ln)
}

// runStreamProbe is `lab-pod stream-probe IP:PORT`: long-lived streams and
// a steady ping to a stream server, reported as JSON lines until it is
// stopped (the lab runs it as a pod, and reads its log).
func runStreamProbe(ctx context.Context, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("lab-pod stream-probe", flag.ContinueOnError)
	p := lab.StreamProbe{}
	fs.IntVar(&p.Streams, "streams", 20, "how many TCP streams to keep open")
	fs.DurationVar(&p.Interval, "interval", 10*time.Millisecond, "each stream's message period")
	fs.DurationVar(&p.PingInterval, "ping-interval", 20*time.Millisecond, "the ping's period")
	fs.DurationVar(&p.Gap, "gap", 100*time.Millisecond, "the silence reported as a gap")
	var rest []string
	if err := parseFlags(fs, args, &rest, out); err != nil {
		return err
	}
	if len(rest) != 1 {
		return errors.New("stream-probe: give the stream server as IP:PORT")
	}
	t, err := netip.ParseAddrPort(rest[0])
	if err != nil {
		return fmt.Errorf("stream-probe: %q is not IP:PORT: %w", rest[0], err)
	}
	p.Target = t
	return p.Run(ctx, out)
}
