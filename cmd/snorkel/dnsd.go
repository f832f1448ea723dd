package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/yaml"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/controller/broker"
	"github.com/snorkel-net/snorkel/controller/dnsfeed"
	"github.com/snorkel-net/snorkel/dnsd"
)

func runDNSD(args []string) error {
	fs := flag.NewFlagSet("dnsd", flag.ContinueOnError)
	listen := fs.String("listen", ":53", "address to answer on, UDP and TCP")
	zones := fs.String("zone", dnsd.DefaultZone, "zones to serve, comma-separated")
	ttl := fs.Duration("ttl", dnsd.DefaultTTL, "TTL of every record, whole seconds")
	maxUDP := fs.Int("max-udp-size", dnsd.DefaultMaxUDPSize, "largest answer over UDP; bigger ones are truncated and asked again over TCP")
	metrics := fs.String("metrics-address", "", "where to serve /metrics, /healthz and /readyz (e.g. :9153); empty for none")
	static := fs.String("static", "", "serve this state file (YAML or JSON) instead of a cluster's; SIGHUP reloads it")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file of this cluster (default $KUBECONFIG or ~/.kube/config)")
	kubeContext := fs.String("context", "", "kubeconfig context (default the current context)")
	namespace := fs.String("namespace", api.AgentNamespace, "the agent's namespace: its Gateways, and the configuration snorkel join wrote")
	clusterID := fs.String("cluster-id", "", "this cluster's ID (default the one snorkel join stored in the agent configuration)")
	globalnet := fs.Bool("globalnet", false, "the clusterset uses Globalnet (with --cluster-id; else read from the agent configuration)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: snorkel dnsd takes flags only", fs.Arg(0))
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *static != "" {
		for _, k := range []string{"kubeconfig", "context", "namespace", "cluster-id", "globalnet"} {
			if set[k] {
				return fmt.Errorf("--%s reads a cluster, --static a file: give one or the other", k)
			}
		}
	}
	if set["globalnet"] && !set["cluster-id"] {
		return errors.New("--globalnet goes with --cluster-id; without it both come from the agent configuration")
	}

	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	srv, err := dnsd.New(dnsd.Config{
		Zones:      strings.Split(*zones, ","),
		TTL:        *ttl,
		MaxUDPSize: *maxUDP,
		Registerer: reg,
		Logger:     log,
	})
	if err != nil {
		return fmt.Errorf("--zone, --ttl or --max-udp-size: %w", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	if *metrics != "" {
		hs, err := listenHTTP("--metrics-address", *metrics, dnsdHandler(srv, reg), metricsLimits)
		if err != nil {
			return err
		}
		defer hs.Close()
	}

	feedDone := make(chan error, 1)
	if *static != "" {
		if err := loadStatic(srv, *static); err != nil {
			return err
		}
		go reloadOnHUP(ctx, srv, *static, log)
		close(feedDone)
	} else {
		feed, err := kubeFeed(ctx, srv, *kubeconfig, *kubeContext, *namespace, *clusterID, *globalnet, log)
		if err != nil {
			return err
		}
		go func() { feedDone <- feed.Run(ctx) }()
	}
	err = srv.ListenAndServe(ctx, *listen)
	stop()
	if ferr := <-feedDone; ferr != nil && err == nil {
		err = ferr
	}
	if err != nil {
		return fmt.Errorf("--listen %s: %w", *listen, err)
	}
	log.Info("dnsd stopped")
	return nil
}

// dnsdHandler serves /metrics, /healthz (the process answers) and /readyz
// (dnsd has its services; before, it answers SERVFAIL).
func dnsdHandler(srv *dnsd.Server, reg *prometheus.Registry) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !srv.Store().Ready() {
			http.Error(w, "waiting for the services", http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintf(w, "ok: %d services\n", srv.Store().Services())
	})
	return mux
}

// loadStatic reads a state file, YAML or JSON, into srv's store.
func loadStatic(srv *dnsd.Server, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--static: %w", err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return fmt.Errorf("--static %s: %w", path, err)
	}
	st, err := dnsd.ParseState(j)
	if err != nil {
		return fmt.Errorf("--static %s: %w", path, err)
	}
	if err := srv.Store().Set(st); err != nil {
		return fmt.Errorf("--static %s: %w", path, err)
	}
	return nil
}

// reloadOnHUP reloads the state file on SIGHUP, keeping the served state
// when the new file is wrong.
func reloadOnHUP(ctx context.Context, srv *dnsd.Server, path string, log *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if err := loadStatic(srv, path); err != nil {
				log.Error("reload failed; still serving the previous state", "error", err)
				continue
			}
			log.Info("reloaded", "file", path, "services", srv.Store().Services())
		}
	}
}

// kubeFeed makes the feed from this cluster's API server; the cluster ID
// and Globalnet come from the agent configuration unless --cluster-id is
// given.
func kubeFeed(ctx context.Context, srv *dnsd.Server, kubeconfig, kubeContext, namespace, clusterID string, globalnet bool, log *slog.Logger) (*dnsfeed.Feed, error) {
	cfg, err := broker.LoadKubeconfig(kubeconfig, kubeContext)
	if err != nil {
		return nil, err
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	if clusterID == "" {
		member, err := api.LoadAgentConfig(ctx, kc, namespace)
		if err != nil {
			return nil, fmt.Errorf("%w (or give --cluster-id)", err)
		}
		clusterID, globalnet = member.ClusterID, member.GlobalCIDR != ""
	}
	return dnsfeed.New(dnsfeed.Config{
		ClusterID:   clusterID,
		Local:       kc,
		LocalConfig: cfg,
		Namespace:   namespace,
		Globalnet:   globalnet,
		Sink:        srv.Store(),
		Logger:      log,
	})
}
