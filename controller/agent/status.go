package agent

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	submv1 "github.com/snorkel-net/snorkel/controller/api/v1"
	"github.com/snorkel-net/snorkel/deploy"
)

const areaStatus = "writing the Gateway status"

// statusLoop writes the Gateway status every StatusInterval, and at once
// when something worth telling changes, until ctx ends.
func (a *Agent) statusLoop(ctx context.Context) {
	tick := time.NewTicker(a.cfg.StatusInterval)
	defer tick.Stop()
	for {
		a.writeStatus(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-a.statusCh:
		}
	}
}

// finalStatus writes the status once more as Run ends: passive.
func (a *Agent) finalStatus() {
	ctx, cancel := context.WithTimeout(context.Background(), a.cfg.Election.RenewDeadline)
	defer cancel()
	a.writeStatus(ctx)
}

// gatewayStatus is the Gateway's status now.
func (a *Agent) gatewayStatus() submv1.GatewayStatus {
	a.mu.Lock()
	active, peers, failure, spec := a.active && a.planned, a.peers, a.failureText(), a.spec
	a.mu.Unlock()
	st := submv1.GatewayStatus{
		Version:       a.cfg.Version,
		HAStatus:      submv1.HAStatusPassive,
		LocalEndpoint: spec,
		StatusFailure: failure,
		Connections:   []submv1.Connection{},
	}
	if active {
		st.HAStatus = submv1.HAStatusActive
		st.Connections = connections(peers, a.cfg.Dataplane.Status())
	}
	return st
}

// connections are the Gateway's connections: one per other cluster, in
// the order of peers, with the data plane's report for those it connects.
func connections(peers []peer, reports []RemoteStatus) []submv1.Connection {
	byID := make(map[string]RemoteStatus, len(reports))
	for _, r := range reports {
		byID[r.ID] = r
	}
	out := make([]submv1.Connection, 0, len(peers))
	for _, p := range peers {
		c := submv1.Connection{Endpoint: p.endpoint, UsingIP: p.usingIP, UsingNAT: p.usingNAT}
		if c.Endpoint.Subnets == nil {
			c.Endpoint.Subnets = []string{}
		}
		r, reported := byID[p.endpoint.ClusterID]
		switch {
		case p.remote == nil:
			c.Status, c.StatusMessage = submv1.ConnectionError, p.problem
		case !reported:
			c.Status, c.StatusMessage = submv1.Connecting, "waiting for the data plane's first report"
		default:
			c.Status, c.StatusMessage = r.Status, r.Message
			if c.Status == "" {
				c.Status = submv1.Connecting
			}
			if r.RTT != nil {
				c.LatencyRTT = &submv1.LatencyRTTSpec{
					Last:    r.RTT.Last.String(),
					Min:     r.RTT.Min.String(),
					Average: r.RTT.Average.String(),
					Max:     r.RTT.Max.String(),
					StdDev:  r.RTT.StdDev.String(),
				}
			}
		}
		out = append(out, c)
	}
	return out
}

// writeStatus writes the Gateway's status, creating the Gateway first if
// it does not exist.
func (a *Agent) writeStatus(ctx context.Context) {
	st := a.gatewayStatus()
	u, err := submv1.ToUnstructured(&submv1.Gateway{Status: st}, "Gateway")
	if err != nil {
		a.setFailure(areaStatus, err)
		return
	}
	status := u.Object["status"]
	r := a.localDyn.Resource(submv1.GatewayResource).Namespace(a.cfg.Namespace)
	where := place{ns: a.cfg.Namespace}
	what := fmt.Sprintf("Gateway %s/%s", a.cfg.Namespace, a.cfg.Identity)
	for attempt := 0; attempt < 2; attempt++ {
		a.mu.Lock()
		gw := a.gateway
		a.mu.Unlock()
		if gw == nil {
			if gw, err = a.getOrCreateGateway(ctx); err != nil {
				a.setFailure(areaStatus, explain(err, what, where))
				return
			}
		}
		gw = gw.DeepCopy()
		gw.Object["status"] = status
		updated, err := r.UpdateStatus(ctx, gw, metav1.UpdateOptions{FieldManager: deploy.FieldManager})
		a.mu.Lock()
		a.gateway = updated
		a.mu.Unlock()
		switch {
		case err == nil:
			a.setFailure(areaStatus, nil)
			return
		case apierrors.IsConflict(err), apierrors.IsNotFound(err):
			// Someone else changed or deleted it: read it again.
			continue
		case ctx.Err() != nil:
			return
		}
		a.setFailure(areaStatus, explain(err, "updating the status of "+what, where))
		return
	}
}

// getOrCreateGateway reads this gateway's Gateway object, creating it if
// it is missing. The status is written separately: create ignores it.
func (a *Agent) getOrCreateGateway(ctx context.Context) (*unstructured.Unstructured, error) {
	r := a.localDyn.Resource(submv1.GatewayResource).Namespace(a.cfg.Namespace)
	u, err := r.Get(ctx, a.cfg.Identity, metav1.GetOptions{})
	if !apierrors.IsNotFound(err) {
		return u, err
	}
	u = &unstructured.Unstructured{}
	u.SetAPIVersion(submv1.Group + "/" + submv1.Version)
	u.SetKind("Gateway")
	u.SetName(a.cfg.Identity)
	u, err = r.Create(ctx, u, metav1.CreateOptions{FieldManager: deploy.FieldManager})
	if apierrors.IsAlreadyExists(err) {
		return r.Get(ctx, a.cfg.Identity, metav1.GetOptions{})
	}
	return u, err
}
