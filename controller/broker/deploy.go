package broker

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/deploy"
)

// PSKSecretName is the Secret in the broker namespace that keeps the
// clusterset's pre-shared key, so that deploying the broker again hands out
// the same key. Only the broker's administrators can read it.
const PSKSecretName = "submariner-ipsec-psk"

// PSKLength is the length in bytes of a generated pre-shared key, as
// Submariner's.
const PSKLength = 48

// DefaultTokenExpiry is how long the broker client token in
// broker-info.subm is valid.
const DefaultTokenExpiry = 365 * 24 * time.Hour

// BrokerOptions configures Deploy. Zero fields take the defaults.
type BrokerOptions struct {
	// Namespace is the broker namespace; default api.DefaultBrokerNamespace.
	Namespace string
	// Globalnet turns Globalnet on for the clusterset.
	Globalnet bool
	// GlobalnetCIDRRange is the range global CIDRs come from; default
	// DefaultGlobalnetCIDRRange.
	GlobalnetCIDRRange string
	// GlobalnetClusterSize is the number of global IPs each cluster gets,
	// rounded up to a power of two; default DefaultGlobalnetClusterSize.
	GlobalnetClusterSize uint64
	// ClustersetIP makes a clusterset IP the default for every exported
	// service (--enable-clusterset-ip).
	ClustersetIP bool
	// ClustersetIPCIDRRange is the range the clusters' clusterset IP
	// blocks come from (--clusterset-ip-cidr-range); default
	// DefaultClustersetIPCIDRRange. It is recorded with the default off
	// too, for services that ask for a clusterset IP.
	ClustersetIPCIDRRange string
	// BrokerURL is the broker's address as members reach it; default the
	// address in the client configuration.
	BrokerURL string
	// PSK, if set, replaces the clusterset's pre-shared key; otherwise
	// the broker's is kept, or a new one of PSKLength random bytes made.
	PSK []byte
	// TokenExpiry is the broker client token's lifetime; default
	// DefaultTokenExpiry.
	TokenExpiry time.Duration
}

// Deployment is what Deploy set up.
type Deployment struct {
	// Info is the content of broker-info.subm.
	Info *Info
	// TokenExpires is when the client token in Info stops being valid.
	TokenExpires time.Time
	// GlobalnetRange and GlobalnetClusterSize are the Globalnet settings,
	// if Globalnet is on.
	GlobalnetRange       netip.Prefix
	GlobalnetClusterSize uint64
	// ClustersetIPRange is the clusterset IP range; ClustersetIP the
	// default for exported services.
	ClustersetIPRange netip.Prefix
	ClustersetIP      bool
}

func (o *BrokerOptions) defaults() {
	if o.Namespace == "" {
		o.Namespace = api.DefaultBrokerNamespace
	}
	if o.GlobalnetCIDRRange == "" {
		o.GlobalnetCIDRRange = DefaultGlobalnetCIDRRange
	}
	if o.GlobalnetClusterSize == 0 {
		o.GlobalnetClusterSize = DefaultGlobalnetClusterSize
	}
	if o.TokenExpiry == 0 {
		o.TokenExpiry = DefaultTokenExpiry
	}
	if o.ClustersetIPCIDRRange == "" {
		o.ClustersetIPCIDRRange = DefaultClustersetIPCIDRRange
	}
}

// Deploy prepares the cluster cfg reaches as the clusterset's broker:
// the CRDs, the broker namespace, the client ServiceAccount with its Role
// (the broker namespace only; the objects of the manifests' broker base),
// the Globalnet and clusterset IP ConfigMaps and the pre-shared key, and returns the
// broker-info.subm content with a fresh client token. Running it again changes nothing but the token; it refuses to change the
// Globalnet settings while clusters hold global CIDRs.
func Deploy(ctx context.Context, cfg *rest.Config, o BrokerOptions) (*Deployment, error) {
	o.defaults()
	gRange, gSize, err := o.check()
	if err != nil {
		return nil, err
	}
	csRange, err := validateClustersetIPRange(o.ClustersetIPCIDRRange)
	if err != nil {
		return nil, err
	}
	if o.Globalnet && o.ClustersetIP {
		return nil, errors.New("--enable-clusterset-ip and --globalnet: clusterset IPs are not supported with Globalnet, as in Submariner; leave one of them out")
	}
	ca, err := configCA(cfg)
	if err != nil {
		return nil, err
	}
	kc, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	if err := deploy.ApplyCRDs(ctx, cfg, false); err != nil {
		return nil, err
	}
	ns := o.Namespace
	objs, err := unstructuredObjects(brokerAccessObjects(ns))
	if err != nil {
		return nil, err
	}
	if err := deploy.Apply(ctx, cfg, objs, false); err != nil {
		return nil, err
	}
	if err := ensureGlobalnetConfigMap(ctx, kc, newGlobalnetConfigMap(ns, o.Globalnet, gRange, gSize)); err != nil {
		return nil, err
	}
	if err := ensureClustersetIPConfigMap(ctx, kc, newClustersetIPConfigMap(ns, o.ClustersetIP, csRange)); err != nil {
		return nil, err
	}
	psk, err := ensurePSK(ctx, kc, ns, o.PSK)
	if err != nil {
		return nil, err
	}
	secs := int64(o.TokenExpiry / time.Second)
	tr, err := kc.CoreV1().ServiceAccounts(ns).CreateToken(ctx, BrokerClientServiceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("requesting a token for ServiceAccount %s/%s: %w", ns, BrokerClientServiceAccount, err)
	}
	brokerURL := o.BrokerURL
	if brokerURL == "" {
		brokerURL = cfg.Host + cfg.APIPath
	}
	return &Deployment{
		Info:                 newInfo(brokerURL, ns, tr.Status.Token, ca, psk, o.Globalnet),
		TokenExpires:         tr.Status.ExpirationTimestamp.Time,
		GlobalnetRange:       gRange,
		GlobalnetClusterSize: gSize,
		ClustersetIPRange:    csRange,
		ClustersetIP:         o.ClustersetIP,
	}, nil
}

// check validates the options and returns the Globalnet range and the
// cluster size rounded up, if Globalnet is on.
func (o *BrokerOptions) check() (netip.Prefix, uint64, error) {
	if err := ValidateNamespace(o.Namespace); err != nil {
		return netip.Prefix{}, 0, err
	}
	if o.BrokerURL != "" {
		if u, err := url.Parse(o.BrokerURL); err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
			return netip.Prefix{}, 0, fmt.Errorf("--broker-url %q is not a URL members can reach the broker's API server at; give one such as https://broker.example:6443", o.BrokerURL)
		}
	}
	if o.PSK != nil && len(o.PSK) < 16 {
		return netip.Prefix{}, 0, fmt.Errorf("the imported pre-shared key has %d bytes: it needs at least 16", len(o.PSK))
	}
	if !o.Globalnet {
		return netip.Prefix{}, 0, nil
	}
	return validateGlobalnetSettings(o.GlobalnetCIDRRange, o.GlobalnetClusterSize)
}

// newInfo is the broker-info.subm content: the client token as a
// ServiceAccount token Secret, the key as subctl wraps it, and the
// components subctl lists.
func newInfo(brokerURL, ns, token string, ca, psk []byte, globalnet bool) *Info {
	components := []string{api.ComponentConnectivity, api.ComponentServiceDiscovery}
	if globalnet {
		components = append(components, api.ComponentGlobalnet)
	}
	slices.Sort(components)
	return &Info{
		BrokerURL: brokerURL,
		ClientToken: &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name:        BrokerClientServiceAccount + "-token",
				Namespace:   ns,
				Annotations: map[string]string{corev1.ServiceAccountNameKey: BrokerClientServiceAccount},
			},
			Type: corev1.SecretTypeServiceAccountToken,
			Data: map[string][]byte{tokenKey: []byte(token), caKey: ca, namespaceKey: []byte(ns)},
		},
		IPSecPSK:         &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: PSKSecretName}, Data: map[string][]byte{pskKey: psk}},
		ServiceDiscovery: true,
		Components:       components,
	}
}

// ValidateNamespace checks a broker namespace name.
func ValidateNamespace(ns string) error {
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		return fmt.Errorf("--namespace %q is not a valid namespace name: use lower-case letters, digits and '-' (a DNS-1123 label), e.g. %q", ns, api.DefaultBrokerNamespace)
	}
	return nil
}

// configCA returns the CA a client configuration trusts, for members to
// trust the broker by.
func configCA(cfg *rest.Config) ([]byte, error) {
	if len(cfg.CAData) > 0 {
		return cfg.CAData, nil
	}
	if cfg.CAFile != "" {
		b, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("reading the kubeconfig's certificate authority: %w", err)
		}
		return b, nil
	}
	return nil, nil
}

// ensureGlobalnetConfigMap creates want, or checks that the existing
// ConfigMap has the same settings; settings may change only while no
// cluster holds a global CIDR.
func ensureGlobalnetConfigMap(ctx context.Context, kc kubernetes.Interface, want *corev1.ConfigMap) error {
	cms := kc.CoreV1().ConfigMaps(want.Namespace)
	for {
		have, err := cms.Get(ctx, want.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			_, err = cms.Create(ctx, want, metav1.CreateOptions{FieldManager: deploy.FieldManager})
			if err == nil {
				return nil
			}
			if apierrors.IsAlreadyExists(err) {
				continue
			}
		}
		if err != nil {
			return fmt.Errorf("the Globalnet ConfigMap %s/%s: %w", want.Namespace, want.Name, err)
		}
		cur, err := parseGlobalnetConfigMap(have)
		if err != nil {
			return err
		}
		wantInfo, _ := parseGlobalnetConfigMap(want)
		if cur.Enabled == wantInfo.Enabled && cur.Range == wantInfo.Range && cur.ClusterSize == wantInfo.ClusterSize {
			return nil
		}
		if len(cur.Clusters) > 0 {
			ids := make([]string, len(cur.Clusters))
			for i, c := range cur.Clusters {
				ids[i] = c.ClusterID
			}
			return fmt.Errorf("the broker already runs with %s, and clusters hold global CIDRs from it (%s): deploy it with the same Globalnet flags, or make those clusters leave first",
				describeGlobalnet(cur), strings.Join(ids, ", "))
		}
		for _, k := range []string{api.GlobalnetEnabledKey, api.GlobalnetCIDRRangeKey, api.GlobalnetClusterSizeKey} {
			delete(have.Data, k)
		}
		if have.Data == nil {
			have.Data = map[string]string{}
		}
		for k, v := range want.Data {
			have.Data[k] = v
		}
		if _, err = cms.Update(ctx, have, metav1.UpdateOptions{FieldManager: deploy.FieldManager}); apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("the Globalnet ConfigMap %s/%s: %w", want.Namespace, want.Name, err)
		}
		return nil
	}
}

func describeGlobalnet(g *globalnetInfo) string {
	if !g.Enabled {
		return "Globalnet off"
	}
	return fmt.Sprintf("Globalnet on (range %s, %d addresses per cluster)", g.Range, g.ClusterSize)
}

// ensurePSK returns the clusterset's pre-shared key: imported if given,
// else the one the broker keeps, else a new random one, which it then
// keeps.
func ensurePSK(ctx context.Context, kc kubernetes.Interface, ns string, imported []byte) ([]byte, error) {
	secrets := kc.CoreV1().Secrets(ns)
	fail := func(err error) ([]byte, error) {
		return nil, fmt.Errorf("pre-shared key Secret %s/%s: %w", ns, PSKSecretName, err)
	}
	if imported != nil {
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: PSKSecretName, Namespace: ns}, Data: map[string][]byte{pskKey: imported}}
		if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{FieldManager: deploy.FieldManager}); apierrors.IsNotFound(err) {
			_, err = secrets.Create(ctx, s, metav1.CreateOptions{FieldManager: deploy.FieldManager})
			if err != nil {
				return fail(err)
			}
		} else if err != nil {
			return fail(err)
		}
		return imported, nil
	}
	for {
		s, err := secrets.Get(ctx, PSKSecretName, metav1.GetOptions{})
		if err == nil {
			if len(s.Data[pskKey]) == 0 {
				return fail(errors.New(`its data "psk" is empty; delete the Secret to have a new key made, or import one with --ipsec-psk-from`))
			}
			return s.Data[pskKey], nil
		}
		if !apierrors.IsNotFound(err) {
			return fail(err)
		}
		psk := make([]byte, PSKLength)
		if _, err := rand.Read(psk); err != nil {
			return fail(err)
		}
		s = &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: PSKSecretName, Namespace: ns}, Data: map[string][]byte{pskKey: psk}}
		if _, err = secrets.Create(ctx, s, metav1.CreateOptions{FieldManager: deploy.FieldManager}); err == nil {
			return psk, nil
		} else if !apierrors.IsAlreadyExists(err) {
			return fail(err)
		}
	}
}
