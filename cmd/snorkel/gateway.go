package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/snorkel-net/snorkel/controller"
	"github.com/snorkel-net/snorkel/gateway"
	"github.com/snorkel-net/snorkel/transport/wireguard"
)

func runGateway(args []string) error {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	cfgPath := fs.String("config", "", "gateway configuration file (YAML)")
	check := fs.Bool("check", false, "validate the configuration and exit")
	debug := addDebugFlags(fs)
	uninstall := fs.Bool("uninstall", false, "remove the guard routes that keep the remote clusters' traffic from leaving in cleartext while no gateway runs, and exit; needs no --config. Run it only when Snorkel leaves the node")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *uninstall {
		return uninstallGateway()
	}
	if *cfgPath == "" {
		return errors.New("--config is required: name the gateway's YAML configuration file")
	}
	cfg, err := controller.LoadGatewayConfig(*cfgPath)
	if err != nil {
		return err
	}
	if *check {
		if err := cfg.Check(); err != nil {
			return fmt.Errorf("config %s: %w", *cfgPath, err)
		}
		fmt.Println("config ok")
		return nil
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("cluster", cfg.Cluster.ID)

	g, err := gateway.New(cfg, gateway.Options{Logger: log})
	if err != nil {
		return err
	}
	// Serve metrics and state before the routes exist: whoever waits for
	// the routes as the sign that the gateway is up can then query it at
	// once.
	if cfg.MetricsAddress != "" {
		srv, err := listenHTTP("metricsAddress", cfg.MetricsAddress, g.MetricsHandler(), metricsLimits)
		if err != nil {
			g.Close()
			return err
		}
		defer srv.Close()
	}
	dbg, err := debug.serve(g.DebugHandler())
	if err != nil {
		g.Close()
		return err
	}
	if dbg != nil {
		defer dbg.Close()
	}
	dev, sys, err := gateway.OpenTUN(&cfg, g.MTU())
	if err != nil {
		g.Close()
		return err
	}
	if sys.Warning != "" {
		log.Warn(sys.Warning)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	log.Info("gateway up", "tun", cfg.TUN.Name, "mtu", g.MTU(), "transport", cfg.Transport.Type,
		"port", cfg.Transport.Port, "remotes", len(cfg.Remotes), "metrics", cfg.MetricsAddress, "debug", *debug.address)

	// Undo the routes before the device goes, so that nothing this process
	// added outlives it but the guard, which drops the remotes' traffic
	// until a gateway runs again or --uninstall.
	runCtx, cancel := context.WithCancel(context.Background())
	go func() {
		<-ctx.Done()
		if err := sys.Undo(); err != nil {
			log.Warn("cleanup", "err", err)
		}
		cancel()
	}()
	err = g.Run(runCtx, dev)
	log.Info("gateway down")
	return err
}

// uninstallGateway is the gateway's part of taking Snorkel off a node: the
// gateway's own state dies with it, the guard does not.
func uninstallGateway() error {
	removed, err := gateway.RemoveGuard()
	for _, p := range removed {
		fmt.Printf("removed the guard of %s\n", p)
	}
	if err != nil {
		return err
	}
	if len(removed) == 0 {
		fmt.Println("no guard routes on this node")
	}
	return nil
}

func runGenkey(args []string) error {
	k, err := wireguard.GenerateKey()
	if err != nil {
		return err
	}
	fmt.Println(k.String())
	return nil
}

func runPubkey(args []string) error {
	b, err := io.ReadAll(io.LimitReader(os.Stdin, 1024))
	if err != nil {
		return err
	}
	k, err := wireguard.ParseKey(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("stdin: %w", err)
	}
	fmt.Println(k.Public().String())
	return nil
}
