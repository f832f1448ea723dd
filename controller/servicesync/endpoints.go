package servicesync

import (
	"net/netip"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

// GlobalIPs gives the Globalnet addresses of this cluster's exported
// services and of headless services' pods. A missing address means "not
// yet": what would use it is left out until it exists and the Syncer is
// told with Resync.
type GlobalIPs interface {
	// ServiceGlobalIP is the global IP of the ClusterIP Service ns/name.
	ServiceGlobalIP(ns, name string) (string, bool)
	// PodGlobalIP is the global IP of the Pod ns/name.
	PodGlobalIP(ns, name string) (string, bool)
}

// importType is the ServiceImport type of a Service; false when the
// Service cannot be exported. Like Lighthouse, only ClusterIP services
// (headless or not) are; the MCS spec refuses only ExternalName.
func importType(svc *corev1.Service) (mcsv1a1.ServiceImportType, bool) {
	if svc.Spec.Type != "" && svc.Spec.Type != corev1.ServiceTypeClusterIP {
		return "", false
	}
	if svc.Spec.ClusterIP == corev1.ClusterIPNone {
		return mcsv1a1.Headless, true
	}
	return mcsv1a1.ClusterSetIP, true
}

// servicePorts are a Service's ports as ServiceImport ports. A headless
// service's are kept too (Lighthouse leaves them out): the MCS API
// defines them for both types.
func servicePorts(svc *corev1.Service) []mcsv1a1.ServicePort {
	out := make([]mcsv1a1.ServicePort, 0, len(svc.Spec.Ports))
	for _, p := range svc.Spec.Ports {
		out = append(out, mcsv1a1.ServicePort{Name: p.Name, Protocol: p.Protocol, Port: p.Port, AppProtocol: p.AppProtocol})
	}
	return out
}

// brokerImport is clusterID's ServiceImport for svc on the broker. ip is
// the address others reach a ClusterSetIP service at (its ClusterIP or
// global IP).
func brokerImport(clusterID, brokerNS string, se *mcsv1a1.ServiceExport, svc *corev1.Service, typ mcsv1a1.ServiceImportType, ip string) *mcsv1a1.ServiceImport {
	si := &mcsv1a1.ServiceImport{
		ObjectMeta: metav1.ObjectMeta{
			Name:      brokerImportName(svc.Namespace, svc.Name, clusterID),
			Namespace: brokerNS,
			Labels: map[string]string{
				LabelServiceName:     svc.Name,
				LabelSourceNamespace: svc.Namespace,
				LabelSourceCluster:   clusterID,
			},
			Annotations: map[string]string{
				AnnotationTimestampPrefix + clusterID: strconv.FormatInt(se.CreationTimestamp.UnixNano(), 10),
				AnnotationPublishNotReady:             strconv.FormatBool(svc.Spec.PublishNotReadyAddresses),
			},
		},
		Spec: mcsv1a1.ServiceImportSpec{
			Type:                  typ,
			Ports:                 servicePorts(svc),
			SessionAffinity:       svc.Spec.SessionAffinity,
			SessionAffinityConfig: svc.Spec.SessionAffinityConfig,
		},
	}
	if ip != "" {
		si.Spec.IPs = []string{ip}
	}
	return si
}

// sliceMeta is the metadata of an EndpointSlice clusterID publishes for
// svc; source is the cluster's own slice it mirrors (headless only).
func sliceMeta(clusterID, brokerNS string, svc *corev1.Service, headless, globalnet bool, source string) metav1.ObjectMeta {
	m := metav1.ObjectMeta{
		Name:      sliceName(clusterID, svc.Namespace, svc.Name, source),
		Namespace: brokerNS,
		Labels: map[string]string{
			discoveryv1.LabelManagedBy: ManagedBy,
			LabelServiceName:           svc.Name,
			LabelSourceNamespace:       svc.Namespace,
			LabelSourceCluster:         clusterID,
			LabelIsHeadless:            strconv.FormatBool(headless),
		},
		Annotations: map[string]string{
			AnnotationPublishNotReady: strconv.FormatBool(svc.Spec.PublishNotReadyAddresses),
			AnnotationGlobalnet:       strconv.FormatBool(headless && globalnet),
		},
	}
	if source != "" {
		m.Labels[LabelSourceName] = source
	}
	return m
}

// ready reads an endpoint's readiness; unknown (nil) counts as ready, as
// the EndpointConditions documentation advises consumers.
func ready(e *discoveryv1.Endpoint) bool {
	return e.Conditions.Ready == nil || *e.Conditions.Ready
}

// clusterIPSlice is the one EndpointSlice of a ClusterIP service: a
// single endpoint, the address others reach the service at, ready when
// any of the service's own endpoints is; the Service's ports.
func clusterIPSlice(clusterID, brokerNS string, svc *corev1.Service, ip string, sources []*discoveryv1.EndpointSlice) *discoveryv1.EndpointSlice {
	anyReady := false
	for _, s := range sources {
		for i := range s.Endpoints {
			if ready(&s.Endpoints[i]) {
				anyReady = true
			}
		}
	}
	addrType := discoveryv1.AddressTypeIPv4
	if a, err := netip.ParseAddr(ip); err == nil && a.Unmap().Is6() {
		addrType = discoveryv1.AddressTypeIPv6
	}
	eps := &discoveryv1.EndpointSlice{
		ObjectMeta:  sliceMeta(clusterID, brokerNS, svc, false, false, ""),
		AddressType: addrType,
		Endpoints: []discoveryv1.Endpoint{{
			Addresses:  []string{ip},
			Conditions: discoveryv1.EndpointConditions{Ready: &anyReady},
		}},
	}
	for _, p := range svc.Spec.Ports {
		eps.Ports = append(eps.Ports, discoveryv1.EndpointPort{
			Name: &p.Name, Protocol: &p.Protocol, Port: &p.Port, AppProtocol: p.AppProtocol,
		})
	}
	return eps
}

// headlessSlice mirrors one of a headless service's own EndpointSlices:
// the pods' endpoints with their hostnames (the endpoint's, else the
// pod's name) and the slice's (target) ports. Ready endpoints only, and
// the not-ready ones too when the Service publishes not-ready addresses
// (Lighthouse copies all and leaves the choice to DNS). Under Globalnet
// (gips not nil) an endpoint's address is its pod's global IP, and an
// endpoint without one is left out.
func headlessSlice(clusterID, brokerNS string, svc *corev1.Service, src *discoveryv1.EndpointSlice, gips GlobalIPs) *discoveryv1.EndpointSlice {
	eps := &discoveryv1.EndpointSlice{
		ObjectMeta:  sliceMeta(clusterID, brokerNS, svc, true, gips != nil, src.Name),
		AddressType: src.AddressType,
		Ports:       src.Ports,
		Endpoints:   []discoveryv1.Endpoint{},
	}
	if gips != nil {
		eps.AddressType = discoveryv1.AddressTypeIPv4
	}
	for i := range src.Endpoints {
		e := &src.Endpoints[i]
		if !ready(e) && !svc.Spec.PublishNotReadyAddresses {
			continue
		}
		pod := ""
		if e.TargetRef != nil && e.TargetRef.Kind == "Pod" {
			pod = e.TargetRef.Name
		}
		out := discoveryv1.Endpoint{
			Addresses:  e.Addresses,
			Conditions: e.Conditions,
			Hostname:   e.Hostname,
			TargetRef:  e.TargetRef,
			Zone:       e.Zone,
		}
		// An endpoint without a hostname keeps none, as Lighthouse exports
		// it: DNS names it by its address (dnsd), not by its pod.
		if out.Hostname != nil && *out.Hostname == "" {
			out.Hostname = nil
		}
		if gips != nil {
			gip, ok := "", false
			if pod != "" {
				gip, ok = gips.PodGlobalIP(svc.Namespace, pod)
			}
			if !ok {
				continue
			}
			out.Addresses = []string{gip}
		}
		eps.Endpoints = append(eps.Endpoints, out)
	}
	return eps
}
