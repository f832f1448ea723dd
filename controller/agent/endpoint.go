package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/snorkel-net/snorkel/controller/api"
	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/deploy"
)

// cableName is Submariner's name of a gateway's cable:
// submariner-cable-<cluster ID>-<private IP with dashes>.
func cableName(clusterID, privateIP string) string {
	return "submariner-cable-" + clusterID + "-" + strings.NewReplacer(".", "-", ":", "-").Replace(privateIP)
}

// endpointName is the name of the Endpoint object of spec, as Submariner
// names it: "<cluster ID>-<cable name>", made a valid object name.
func endpointName(spec *submv1.EndpointSpec) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '.':
			return r
		case r >= 'A' && r <= 'Z':
			return r + 'a' - 'A'
		}
		return '-'
	}, spec.ClusterID+"-"+spec.CableName)
}

// localEndpointSpec is this gateway's Endpoint spec.
func localEndpointSpec(c *Config) submv1.EndpointSpec {
	m := c.Member
	subnets := append(append([]string{}, m.ClusterCIDRs...), m.ServiceCIDRs...)
	if m.GlobalCIDR != "" {
		subnets = []string{m.GlobalCIDR}
	}
	bc := maps.Clone(c.BackendConfig)
	if bc == nil {
		bc = map[string]string{}
	}
	bc[BackendConfigUDPPort] = strconv.Itoa(c.Port)
	bc[BackendConfigPreferredServer] = strconv.FormatBool(m.PreferredServer)
	bc[BackendConfigCheckedSegments] = "true"
	if !m.NATTraversalOff {
		bc[BackendConfigNATDiscoveryPort] = strconv.Itoa(c.NATDiscoveryPort)
	}
	return submv1.EndpointSpec{
		ClusterID:     m.ClusterID,
		CableName:     cableName(m.ClusterID, c.PrivateIP),
		HealthCheckIP: c.HealthCheckIP,
		Hostname:      c.Hostname,
		Subnets:       subnets,
		PrivateIP:     c.PrivateIP,
		PublicIP:      c.PublicIP,
		NATEnabled:    natEnabled(c, c.PublicIP),
		Backend:       m.CableDriver,
		BackendConfig: bc,
	}
}

// natEnabled is an Endpoint's nat_enabled with public IP pub: behind NAT
// exactly when others must use another address than the one the gateway
// has, and NAT traversal is on; with `--natt=false` the others connect to
// the private IP.
func natEnabled(c *Config, pub string) bool {
	return !c.Member.NATTraversalOff && pub != "" && pub != c.PrivateIP
}

// endpointCluster is the cluster ID of an Endpoint object.
func endpointCluster(u *unstructured.Unstructured) string {
	id, _, _ := unstructured.NestedString(u.Object, "spec", "cluster_id")
	return id
}

// place names the API server an object lives on, for errors and logs.
type place struct {
	broker bool
	ns     string
}

func (p place) String() string {
	if p.broker {
		return "on the broker"
	}
	return "in this cluster"
}

// explain adds to an API error the object it concerns and what to do.
func explain(err error, what string, where place) error {
	if err == nil {
		return nil
	}
	switch {
	case where.broker && apierrors.IsUnauthorized(err):
		return fmt.Errorf("%s %s: the broker refused the agent's token (expired or revoked): run `snorkel join` again with a fresh broker-info.subm: %w", what, where, err)
	case where.broker && apierrors.IsForbidden(err):
		return fmt.Errorf("%s %s: the broker token lacks the right: run `snorkel deploy-broker` again to restore its Role, then `snorkel join`: %w", what, where, err)
	case apierrors.IsForbidden(err), apierrors.IsUnauthorized(err):
		return fmt.Errorf("%s %s: the agent's credentials lack the right: run `snorkel join` again to restore the agent's RBAC: %w", what, where, err)
	case namespaceMissing(err):
		return fmt.Errorf("%s %s: namespace %s does not exist: run `snorkel join` (or create it): %w", what, where, where.ns, err)
	}
	return fmt.Errorf("%s %s: %w", what, where, err)
}

// namespaceMissing reports whether err says the namespace of the object
// does not exist.
func namespaceMissing(err error) bool {
	var s apierrors.APIStatus
	if !apierrors.IsNotFound(err) || !errors.As(err, &s) {
		return false
	}
	d := s.Status().Details
	return d != nil && d.Kind == "namespaces"
}

// publishEndpoint makes spec the one Endpoint of its cluster in r: it
// deletes the cluster's other Endpoints first and then creates or updates
// its own, so that the namespace never holds two for the cluster.
func publishEndpoint(ctx context.Context, r dynamic.ResourceInterface, spec *submv1.EndpointSpec, where place) error {
	name := endpointName(spec)
	what := fmt.Sprintf("Endpoint %s/%s", where.ns, name)
	list, err := r.List(ctx, metav1.ListOptions{})
	if err != nil {
		return explain(err, "listing the Endpoints of namespace "+where.ns, where)
	}
	var own *unstructured.Unstructured
	var errs []error
	for i := range list.Items {
		u := &list.Items[i]
		switch {
		case endpointCluster(u) != spec.ClusterID:
		case u.GetName() == name:
			own = u
		default:
			err := r.Delete(ctx, u.GetName(), metav1.DeleteOptions{})
			if err != nil && !apierrors.IsNotFound(err) {
				errs = append(errs, explain(err, fmt.Sprintf("deleting Endpoint %s/%s, an older gateway's of this cluster,", where.ns, u.GetName()), where))
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	if own == nil {
		u, err := submv1.ToUnstructured(&submv1.Endpoint{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{api.ClusterIDLabel: spec.ClusterID}},
			Spec:       *spec,
		}, "Endpoint")
		if err != nil {
			return err
		}
		_, err = r.Create(ctx, u, metav1.CreateOptions{FieldManager: deploy.FieldManager})
		return explain(err, "creating "+what, where)
	}
	have, err := submv1.FromUnstructured[submv1.Endpoint](own)
	if err != nil {
		return err
	}
	if sameEndpointSpec(have.Spec, *spec) && have.Labels[api.ClusterIDLabel] == spec.ClusterID {
		return nil
	}
	have.Spec = *spec
	if have.Labels == nil {
		have.Labels = map[string]string{}
	}
	have.Labels[api.ClusterIDLabel] = spec.ClusterID
	u, err := submv1.ToUnstructured(have, "Endpoint")
	if err != nil {
		return err
	}
	_, err = r.Update(ctx, u, metav1.UpdateOptions{FieldManager: deploy.FieldManager})
	return explain(err, "updating "+what, where)
}

// clusterSpec is the Cluster spec this cluster publishes.
func clusterSpec(m *api.AgentConfig) submv1.ClusterSpec {
	s := submv1.ClusterSpec{
		ClusterID:   m.ClusterID,
		ClusterCIDR: append([]string{}, m.ClusterCIDRs...),
		ServiceCIDR: append([]string{}, m.ServiceCIDRs...),
		GlobalCIDR:  []string{},
	}
	if m.GlobalCIDR != "" {
		s.GlobalCIDR = []string{m.GlobalCIDR}
	}
	return s
}

// sameEndpointSpec compares two Endpoint specs, an empty list or map
// equal to a missing one.
func sameEndpointSpec(a, b submv1.EndpointSpec) bool { return equality.Semantic.DeepEqual(a, b) }

// sameClusterSpec compares what the agent publishes, ignoring color codes,
// which it leaves as they are.
func sameClusterSpec(a, b submv1.ClusterSpec) bool {
	a.ColorCodes, b.ColorCodes = nil, nil
	return equality.Semantic.DeepEqual(a, b)
}

// publishCluster creates or updates the cluster's Cluster object on the
// broker. The object `snorkel join` made carries the UID of the cluster's
// kube-system namespace; one that names another cluster is left alone.
func publishCluster(ctx context.Context, r dynamic.ResourceInterface, spec submv1.ClusterSpec, uid string, where place) error {
	what := fmt.Sprintf("Cluster %s/%s", where.ns, spec.ClusterID)
	u, err := r.Get(ctx, spec.ClusterID, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		c := &submv1.Cluster{
			ObjectMeta: metav1.ObjectMeta{
				Name:        spec.ClusterID,
				Labels:      map[string]string{api.ClusterIDLabel: spec.ClusterID},
				Annotations: map[string]string{api.ClusterUIDAnnotation: uid},
			},
			Spec: spec,
		}
		nu, err := submv1.ToUnstructured(c, "Cluster")
		if err != nil {
			return err
		}
		_, err = r.Create(ctx, nu, metav1.CreateOptions{FieldManager: deploy.FieldManager})
		return explain(err, "creating "+what, where)
	}
	if err != nil {
		return explain(err, "reading "+what, where)
	}
	if owner, ok := u.GetAnnotations()[api.ClusterUIDAnnotation]; ok && owner != uid {
		return fmt.Errorf("%s %s belongs to another cluster (kube-system UID %s; this cluster's is %s): this cluster's ID is taken; run `snorkel join` with another --clusterid",
			what, where, owner, uid)
	}
	c, err := submv1.FromUnstructured[submv1.Cluster](u)
	if err != nil {
		return err
	}
	if sameClusterSpec(c.Spec, spec) {
		return nil
	}
	spec.ColorCodes = c.Spec.ColorCodes
	c.Spec = spec
	nu, err := submv1.ToUnstructured(c, "Cluster")
	if err != nil {
		return err
	}
	_, err = r.Update(ctx, nu, metav1.UpdateOptions{FieldManager: deploy.FieldManager})
	return explain(err, "updating "+what, where)
}
