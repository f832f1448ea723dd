package broker

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1apply "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/deploy"
)

// JoinOptions configures Join; each field is the `snorkel join` flag of
// the same meaning.
type JoinOptions struct {
	// ClusterID names the cluster in the clusterset (--clusterid).
	ClusterID string
	// GlobalCIDR asks for this global CIDR under Globalnet
	// (--globalnet-cidr): any block of the broker's range that overlaps
	// no other cluster's; default the first free block.
	GlobalCIDR string
	// GlobalnetClusterSize is the number of global IPs the first free
	// block must hold, rounded up to a power of two
	// (--globalnet-cluster-size); default the broker's cluster size.
	// GlobalCIDR and GlobalnetClusterSize exclude each other.
	GlobalnetClusterSize uint64
	// CableDriver is the gateway's transport (--cable-driver); default
	// api.DefaultCableDriver.
	CableDriver string
	// ClusterCIDRs and ServiceCIDRs are the cluster's Pod and Service
	// CIDRs (--clustercidr, --servicecidr); default what the cluster
	// tells.
	ClusterCIDRs []string
	ServiceCIDRs []string
	// EnableClustersetIP gives the services this cluster exports a
	// clusterset IP unless their ServiceExport says otherwise
	// (--enable-clusterset-ip); the broker's default turns it on too.
	EnableClustersetIP bool
	// ClustersetIPCIDR asks for this block of the broker's clusterset IP
	// range (--clusterset-ip-cidr); default the first free block.
	ClustersetIPCIDR string
	// Gateway holds the settings of the flags --natt, --nattport,
	// --preferred-server, --health-check, --custom-domains and
	// --air-gapped, which the agent configuration keeps.
	Gateway api.GatewaySettings
	// BrokerInsecure is --check-broker-certificate=false: join and the
	// agent do not check the broker's certificate.
	BrokerInsecure bool
	// NoGlobalnet is --globalnet=false, subctl's way to keep one cluster
	// of a Globalnet clusterset out of Globalnet. Snorkel does not mix
	// clusters with and without global CIDRs in one clusterset: join
	// refuses it on a Globalnet broker, and it changes nothing on another.
	NoGlobalnet bool
}

// Join makes the cluster member reaches a member of the clusterset info
// describes: it registers a Cluster object with the broker (with only the
// broker token info carries), records the cluster's global CIDR if the
// broker has Globalnet on, and installs into the member the CRDs, the
// ServiceAccounts of the agent, the route agent and dnsd with
// least-privilege RBAC, and the
// agent configuration (returned); DeployMember then runs them. Joining
// again with the same ID is idempotent; an ID another cluster holds is
// refused.
func Join(ctx context.Context, member *rest.Config, info *Info, o JoinOptions) (*api.AgentConfig, error) {
	if err := info.Validate(); err != nil {
		return nil, err
	}
	req, err := o.parse()
	if err != nil {
		return nil, err
	}
	mkc, err := kubernetes.NewForConfig(member)
	if err != nil {
		return nil, err
	}
	ks, err := mkc.CoreV1().Namespaces().Get(ctx, metav1.NamespaceSystem, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("reading this cluster's identity (namespace kube-system): %w", err)
	}
	if req.pods, req.svcs, err = memberCIDRs(ctx, mkc, req.pods, req.svcs); err != nil {
		return nil, err
	}
	bcfg, err := connectBroker(ctx, info, member.Dial, o.BrokerInsecure)
	if err != nil {
		return nil, err
	}
	if req.clustersetIP() && !info.IsServiceDiscoveryEnabled() {
		return nil, errors.New("--enable-clusterset-ip and --clusterset-ip-cidr: the broker-info file has service discovery off, and clusterset IPs are part of it; leave the flags out")
	}
	req.serviceDiscovery = info.IsServiceDiscoveryEnabled()
	spec, reg, err := register(ctx, bcfg, info.Namespace(), string(ks.UID), req)
	if err != nil {
		return nil, err
	}
	cfg := &api.AgentConfig{
		ClusterID:        spec.ClusterID,
		BrokerURL:        bcfg.Host,
		BrokerNamespace:  info.Namespace(),
		BrokerToken:      bcfg.BearerToken,
		BrokerCA:         bcfg.CAData,
		BrokerInsecure:   o.BrokerInsecure,
		PSK:              info.PSK(),
		CableDriver:      req.driver,
		ClusterCIDRs:     spec.ClusterCIDR,
		ServiceCIDRs:     spec.ServiceCIDR,
		ServiceDiscovery: info.IsServiceDiscoveryEnabled(),
		GatewaySettings:  o.Gateway,
	}
	cfg.NATTPort = cfg.Port()
	cfg.HealthCheckInterval, cfg.HealthCheckMaxPacketLossCount = cfg.HealthInterval(), cfg.HealthMaxPacketLoss()
	if len(spec.GlobalCIDR) > 0 {
		cfg.GlobalCIDR = spec.GlobalCIDR[0]
		cfg.GlobalnetCIDRRange = reg.globalRange.String()
	}
	if reg.clustersetBlock.IsValid() {
		cfg.ClustersetIPCIDR = reg.clustersetBlock.String()
		cfg.ClustersetIPCIDRRange = reg.clustersetRange.String()
		cfg.ClustersetIPEnabled = o.EnableClustersetIP || reg.clustersetDefault
	}
	if err := installAgent(ctx, member, mkc, cfg); err != nil {
		return nil, fmt.Errorf("cluster %q is registered with the broker, but installing its agent failed: %w; run the join again", spec.ClusterID, err)
	}
	return cfg, nil
}

// joinRequest is JoinOptions checked and parsed.
type joinRequest struct {
	id, driver string
	pods, svcs []netip.Prefix
	// global is the requested global CIDR; invalid if none.
	global netip.Prefix
	// globalSize is the requested number of global IPs; 0 if none.
	globalSize  uint64
	noGlobalnet bool
	// clustersetOn is --enable-clusterset-ip; clusterset the requested
	// clusterset IP CIDR, invalid if none.
	clustersetOn bool
	clusterset   netip.Prefix
	// serviceDiscovery is the broker-info file's: clusterset IP blocks
	// are recorded only with it.
	serviceDiscovery bool
}

// clustersetIP reports whether a clusterset IP flag was given.
func (r *joinRequest) clustersetIP() bool { return r.clustersetOn || r.clusterset.IsValid() }

// registration is what register recorded with the broker besides the
// Cluster: the ranges are invalid when off.
type registration struct {
	globalRange netip.Prefix
	// clustersetRange is the broker's clusterset IP range and
	// clustersetBlock this cluster's block of it; clustersetDefault the
	// broker's --enable-clusterset-ip.
	clustersetRange, clustersetBlock netip.Prefix
	clustersetDefault                bool
}

func (o JoinOptions) parse() (*joinRequest, error) {
	if err := api.ValidateClusterID(o.ClusterID); err != nil {
		return nil, err
	}
	r := &joinRequest{id: o.ClusterID, globalSize: o.GlobalnetClusterSize, noGlobalnet: o.NoGlobalnet, clustersetOn: o.EnableClustersetIP}
	var err error
	if r.driver, err = api.NormalizeCableDriver(o.CableDriver); err != nil {
		return nil, err
	}
	if r.pods, err = api.ParseCIDRs("--clustercidr", o.ClusterCIDRs); err != nil {
		return nil, err
	}
	if r.svcs, err = api.ParseCIDRs("--servicecidr", o.ServiceCIDRs); err != nil {
		return nil, err
	}
	if p := o.Gateway.NATTPort; p != 0 {
		if err := api.ValidateNATTPort(p); err != nil {
			return nil, err
		}
	}
	if err := api.ValidateCustomDomains(o.Gateway.CustomDomains); err != nil {
		return nil, err
	}
	if err := api.ValidateHealthCheck(o.Gateway.HealthCheckInterval, o.Gateway.HealthCheckMaxPacketLossCount); err != nil {
		return nil, err
	}
	if o.GlobalCIDR != "" {
		if r.global, err = netip.ParsePrefix(strings.TrimSpace(o.GlobalCIDR)); err != nil {
			return nil, fmt.Errorf("--globalnet-cidr %q is not a CIDR: give one such as 242.1.0.0/16", o.GlobalCIDR)
		}
		if r.globalSize != 0 {
			return nil, fmt.Errorf("--globalnet-cidr %s and --globalnet-cluster-size %d: give only one of them, the block itself or how many global IPs the first free block must hold", o.GlobalCIDR, r.globalSize)
		}
	}
	if o.ClustersetIPCIDR != "" {
		r.clusterset, err = netip.ParsePrefix(strings.TrimSpace(o.ClustersetIPCIDR))
		if err != nil || !r.clusterset.Addr().Is4() {
			return nil, fmt.Errorf("--clusterset-ip-cidr %q is not an IPv4 CIDR: give a free block of the broker's range, such as 243.0.16.0/20", o.ClustersetIPCIDR)
		}
	}
	return r, nil
}

// register records the cluster with the broker: its global CIDR if the
// broker has Globalnet on, else its clusterset IP CIDR if the broker has a
// clusterset IP range and service discovery is on, and its Cluster
// object, owned by uid. It returns the Cluster's spec, and the ranges and
// block it recorded.
//
// The ID is checked before the Globalnet record is made, so that a taken
// ID costs no global CIDR; the Cluster is written after it, so that the
// other clusters never see it without its global CIDR. Two clusters racing
// for one ID share its record, and one of them is refused when it writes
// the Cluster.
func register(ctx context.Context, bcfg *rest.Config, ns, uid string, req *joinRequest) (submv1.ClusterSpec, registration, error) {
	var reg registration
	spec := submv1.ClusterSpec{
		ClusterID:   req.id,
		ClusterCIDR: prefixStrings(req.pods),
		ServiceCIDR: prefixStrings(req.svcs),
		GlobalCIDR:  []string{},
	}
	bkc, err := kubernetes.NewForConfig(bcfg)
	if err != nil {
		return spec, reg, err
	}
	bdc, err := dynamic.NewForConfig(bcfg)
	if err != nil {
		return spec, reg, err
	}
	g, _, err := readGlobalnet(ctx, bkc, ns)
	if err != nil {
		return spec, reg, err
	}
	if g.Enabled && req.noGlobalnet {
		return spec, reg, fmt.Errorf("--globalnet=false: the broker has Globalnet on (%s), and Snorkel does not mix clusters with and without global CIDRs in one clusterset; leave the flag out, or deploy a broker without --globalnet", g.Range)
	}
	if _, err := precheckGlobalCIDR(g, req.id, req.global, req.globalSize); err != nil {
		return spec, reg, err
	}
	if g.Enabled && req.clustersetIP() {
		return spec, reg, errors.New("--enable-clusterset-ip and --clusterset-ip-cidr: the broker has Globalnet on, and clusterset IPs are not supported with Globalnet, as in Submariner; leave the flags out")
	}
	var cs *clustersetIPInfo
	if !g.Enabled && req.serviceDiscovery {
		if cs, _, err = readClustersetIP(ctx, bkc, ns); err != nil {
			return spec, reg, err
		}
		if cs == nil && req.clustersetIP() {
			return spec, reg, fmt.Errorf("--enable-clusterset-ip and --clusterset-ip-cidr: the broker has no clusterset IP range (ConfigMap %s/%s); run `snorkel deploy-broker` again to add it", ns, api.ClustersetIPConfigMapName)
		}
		if cs != nil && req.clusterset.IsValid() {
			if err := checkRequestedClustersetIPCIDR(cs, req.id, req.clusterset); err != nil {
				return spec, reg, err
			}
		}
	}
	clusters := bdc.Resource(submv1.ClusterResource).Namespace(ns)
	if err := checkClusterIDFree(ctx, clusters, req.id, uid); err != nil {
		return spec, reg, err
	}
	if g.Enabled {
		reg.globalRange = g.Range
		got, err := recordGlobalCIDR(ctx, bkc, ns, req.id, req.global, req.globalSize)
		if errors.Is(err, errGlobalnetOff) {
			err = errors.New("the broker's Globalnet was turned off while this cluster joined; join again")
		}
		if err != nil {
			return spec, reg, err
		}
		spec.GlobalCIDR = []string{got.String()}
	}
	if cs != nil {
		block, info, err := recordClustersetIPCIDR(ctx, bkc, ns, req.id, req.clusterset)
		if err != nil {
			return spec, reg, err
		}
		reg.clustersetRange, reg.clustersetBlock, reg.clustersetDefault = info.Range, block, info.Enabled
	}
	return spec, reg, writeCluster(ctx, clusters, uid, spec)
}

// precheckGlobalCIDR refuses a requested global CIDR or cluster size
// before anything is written; recordGlobalCIDR checks again against the
// latest records. It returns the cluster size rounded up.
func precheckGlobalCIDR(g *globalnetInfo, clusterID string, want netip.Prefix, size uint64) (uint64, error) {
	if size != 0 {
		if !g.Enabled {
			return 0, fmt.Errorf("--globalnet-cluster-size %d: the broker has Globalnet off; leave the flag out, or deploy the broker with --globalnet", size)
		}
		return roundClusterSize("--globalnet-cluster-size", g.Range, size)
	}
	if !want.IsValid() {
		return 0, nil
	}
	if !g.Enabled {
		return 0, fmt.Errorf("--globalnet-cidr %s: the broker has Globalnet off; leave the flag out, or deploy the broker with --globalnet", want)
	}
	if have, held := g.lookup(clusterID); held {
		if have != want {
			return 0, fmt.Errorf("--globalnet-cidr %s: cluster %q already holds global CIDR %s; leave the flag out to keep it, or make the cluster leave the clusterset first", want, clusterID, have)
		}
		return 0, nil
	}
	return 0, checkRequestedGlobalCIDR(g, clusterID, want)
}

// memberCIDRs completes the Pod and Service CIDRs the flags gave with what
// the cluster tells.
func memberCIDRs(ctx context.Context, kc kubernetes.Interface, pods, svcs []netip.Prefix) ([]netip.Prefix, []netip.Prefix, error) {
	var errs []error
	if len(pods) == 0 {
		found, why := discoverPodCIDRs(ctx, kc)
		p, err := api.ParseCIDRs("the cluster's Pod CIDR", found)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%w; pass --clustercidr", err))
		case len(p) == 0:
			errs = append(errs, fmt.Errorf("cannot tell this cluster's Pod CIDR (%s): pass --clustercidr", why))
		}
		pods = p
	}
	if len(svcs) == 0 {
		found, why := discoverServiceCIDRs(ctx, kc)
		p, err := api.ParseCIDRs("the cluster's Service CIDR", found)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("%w; pass --servicecidr", err))
		case len(p) == 0:
			errs = append(errs, fmt.Errorf("cannot tell this cluster's Service CIDR (%s): pass --servicecidr", why))
		}
		svcs = p
	}
	return pods, svcs, errors.Join(errs...)
}

// connectBroker checks that info's token is accepted and returns the
// configuration that works: trusting info's CA, or, if the broker's
// certificate is signed by another (a public CA), the system's roots. The
// broker is dialled with dial when it is set: the member's, since both are
// reached from the same place (a lab's network namespace, say). With
// insecure, the certificate is not checked at all.
func connectBroker(ctx context.Context, info *Info, dial func(ctx context.Context, network, addr string) (net.Conn, error), insecure bool) (*rest.Config, error) {
	cfg := info.RESTConfig()
	cfg.Dial = dial
	if insecure {
		cfg = (&api.AgentConfig{BrokerURL: info.BrokerURL, BrokerToken: info.Token(), BrokerInsecure: true}).BrokerConfig()
		cfg.Dial = dial
		if err := probeBroker(ctx, cfg, info.Namespace()); err != nil {
			return nil, fmt.Errorf("cannot reach the broker at %s (brokerURL in the broker-info file, or --broker-url), even without checking its certificate: %w", info.BrokerURL, err)
		}
		return cfg, nil
	}
	err := probeBroker(ctx, cfg, info.Namespace())
	if err != nil && len(cfg.CAData) > 0 && isUnknownAuthority(err) {
		system := api.BrokerRESTConfig(info.BrokerURL, info.Token(), nil)
		system.Dial = dial
		if probeBroker(ctx, system, info.Namespace()) == nil {
			return system, nil
		}
	}
	switch {
	case err == nil:
		return cfg, nil
	case apierrors.IsUnauthorized(err):
		return nil, fmt.Errorf("the broker at %s refused the token of the broker-info file (expired, or its ServiceAccount was deleted): run `snorkel deploy-broker` again for a new file: %w", info.BrokerURL, err)
	case apierrors.IsForbidden(err):
		return nil, fmt.Errorf("the broker-info file's token may not read Clusters in namespace %q of the broker at %s: run `snorkel deploy-broker` again to restore its Role: %w", info.Namespace(), info.BrokerURL, err)
	default:
		if isUnknownAuthority(err) {
			return nil, fmt.Errorf("the broker at %s has a certificate that neither the broker-info file's CA nor the system's roots sign: write the file again with snorkel deploy-broker, or join with --check-broker-certificate=false to skip the check: %w", info.BrokerURL, err)
		}
		return nil, fmt.Errorf("cannot reach the broker at %s (brokerURL in the broker-info file, or --broker-url): %w", info.BrokerURL, err)
	}
}

func probeBroker(ctx context.Context, cfg *rest.Config, ns string) error {
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	_, err = dc.Resource(submv1.ClusterResource).Namespace(ns).List(ctx, metav1.ListOptions{Limit: 1})
	return err
}

func isUnknownAuthority(err error) bool {
	var ua x509.UnknownAuthorityError
	return errors.As(err, &ua)
}

// checkClusterIDFree refuses a cluster ID whose Cluster object on the
// broker belongs to another cluster than the one whose kube-system UID is
// uid.
func checkClusterIDFree(ctx context.Context, clusters dynamic.ResourceInterface, id, uid string) error {
	u, err := clusters.Get(ctx, id, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading Cluster %q on the broker: %w", id, err)
	}
	return checkOwner(u.GetAnnotations(), id, uid)
}

func checkOwner(annotations map[string]string, clusterID, uid string) error {
	owner, ok := annotations[api.ClusterUIDAnnotation]
	switch {
	case !ok:
		return fmt.Errorf("--clusterid %q is taken: the broker has a Cluster of that name that no `snorkel join` registered; choose another ID, or remove that Cluster from the broker if its cluster is gone", clusterID)
	case owner != uid:
		return fmt.Errorf("--clusterid %q is taken by another cluster (kube-system UID %s; this cluster's is %s): choose another ID", clusterID, owner, uid)
	}
	return nil
}

// writeCluster creates the cluster's Cluster object on the broker with
// spec, recording uid as its owner, or updates the one uid owns.
func writeCluster(ctx context.Context, clusters dynamic.ResourceInterface, uid string, spec submv1.ClusterSpec) error {
	err := retry.RetryOnConflict(conflictBackoff, func() error {
		u, err := clusters.Get(ctx, spec.ClusterID, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			obj, err := submv1.ToUnstructured(&submv1.Cluster{
				ObjectMeta: metav1.ObjectMeta{
					Name:        spec.ClusterID,
					Labels:      map[string]string{api.ClusterIDLabel: spec.ClusterID},
					Annotations: map[string]string{api.ClusterUIDAnnotation: uid},
				},
				Spec: spec,
			}, "Cluster")
			if err != nil {
				return err
			}
			_, err = clusters.Create(ctx, obj, metav1.CreateOptions{FieldManager: deploy.FieldManager})
			if apierrors.IsAlreadyExists(err) {
				// Lost a race: read the winner's and check it as a conflict.
				return apierrors.NewConflict(submv1.ClusterResource.GroupResource(), spec.ClusterID, err)
			}
			return err
		}
		if err != nil {
			return err
		}
		if err := checkOwner(u.GetAnnotations(), spec.ClusterID, uid); err != nil {
			return err
		}
		c, err := submv1.FromUnstructured[submv1.Cluster](u)
		if err != nil {
			return err
		}
		c.Spec = spec
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		c.Labels[api.ClusterIDLabel] = spec.ClusterID
		obj, err := submv1.ToUnstructured(c, "Cluster")
		if err != nil {
			return err
		}
		_, err = clusters.Update(ctx, obj, metav1.UpdateOptions{FieldManager: deploy.FieldManager})
		return err
	})
	if err != nil {
		return fmt.Errorf("registering Cluster %q with the broker: %w", spec.ClusterID, err)
	}
	return nil
}

// installAgent installs into the member cluster the CRDs, api.AgentNamespace,
// the ServiceAccounts of the agent, the route agent and dnsd with their
// RBAC, and the agent's
// configuration Secret: everything but the workloads, which DeployMember
// runs.
func installAgent(ctx context.Context, member *rest.Config, kc kubernetes.Interface, cfg *api.AgentConfig) error {
	if err := deploy.ApplyCRDs(ctx, member, false); err != nil {
		return err
	}
	objs, err := unstructuredObjects(memberAccessObjects())
	if err != nil {
		return err
	}
	if err := deploy.Apply(ctx, member, objs, false); err != nil {
		return err
	}
	if _, err := kc.CoreV1().Secrets(api.AgentNamespace).Apply(ctx, agentSecret(cfg), applyOpts); err != nil {
		return fmt.Errorf("the agent Secret %s/%s: %w", api.AgentNamespace, api.AgentSecretName, err)
	}
	return nil
}

var applyOpts = metav1.ApplyOptions{FieldManager: deploy.FieldManager, Force: true}

// agentSecret is the Secret that holds cfg.
func agentSecret(cfg *api.AgentConfig) *corev1apply.SecretApplyConfiguration {
	return corev1apply.Secret(api.AgentSecretName, api.AgentNamespace).WithLabels(partOfLabel).WithType(corev1.SecretTypeOpaque).WithData(cfg.SecretData())
}

func prefixStrings(ps []netip.Prefix) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.String()
	}
	return out
}
