// Package v1 holds the submariner.io/v1 API types Snorkel serves, with
// Submariner's JSON field names so that existing tools and users read them
// unchanged. The objects travel through the dynamic client and are converted
// with FromUnstructured and ToUnstructured; deploy/crds holds their
// CustomResourceDefinitions.
package v1

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Group and Version of the API.
const (
	Group   = "submariner.io"
	Version = "v1"
)

// The resources, for the dynamic client.
var (
	ClusterResource               = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "clusters"}
	EndpointResource              = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "endpoints"}
	GatewayResource               = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "gateways"}
	GlobalEgressIPResource        = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "globalegressips"}
	ClusterGlobalEgressIPResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "clusterglobalegressips"}
	GlobalIngressIPResource       = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "globalingressips"}
)

// Cluster describes one member cluster to the others; it lives in the
// broker's namespace.
type Cluster struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ClusterSpec `json:"spec"`
}

// ClusterSpec is a cluster's identity and address ranges.
type ClusterSpec struct {
	ClusterID   string   `json:"cluster_id"`
	ColorCodes  []string `json:"color_codes,omitempty"`
	ServiceCIDR []string `json:"service_cidr"`
	ClusterCIDR []string `json:"cluster_cidr"`
	GlobalCIDR  []string `json:"global_cidr"`
}

// Endpoint is the active gateway of a cluster: where to reach it and how.
type Endpoint struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              EndpointSpec `json:"spec"`
}

// EndpointSpec is a gateway's address, subnets and cable (transport).
type EndpointSpec struct {
	ClusterID     string            `json:"cluster_id"`
	CableName     string            `json:"cable_name"`
	HealthCheckIP string            `json:"healthCheckIP,omitempty"`
	Hostname      string            `json:"hostname"`
	Subnets       []string          `json:"subnets"`
	PrivateIP     string            `json:"private_ip"`
	PublicIP      string            `json:"public_ip"`
	NATEnabled    bool              `json:"nat_enabled"`
	Backend       string            `json:"backend"`
	BackendConfig map[string]string `json:"backend_config,omitempty"`
}

// Gateway reports a gateway's state and its connections; the agent keeps
// it current.
type Gateway struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Status            GatewayStatus `json:"status"`
}

// GatewayStatus is a gateway's role and connections.
type GatewayStatus struct {
	Version       string       `json:"version"`
	HAStatus      HAStatus     `json:"haStatus"`
	LocalEndpoint EndpointSpec `json:"localEndpoint"`
	StatusFailure string       `json:"statusFailure"`
	Connections   []Connection `json:"connections"`
}

// HAStatus is whether a gateway is the cluster's active one.
type HAStatus string

// HAStatus values.
const (
	HAStatusActive  HAStatus = "active"
	HAStatusPassive HAStatus = "passive"
)

// Connection is a gateway's link to one remote cluster.
type Connection struct {
	Status        ConnectionStatus `json:"status"`
	StatusMessage string           `json:"statusMessage"`
	Endpoint      EndpointSpec     `json:"endpoint"`
	UsingIP       string           `json:"usingIP,omitempty"`
	UsingNAT      bool             `json:"usingNAT,omitempty"`
	LatencyRTT    *LatencyRTTSpec  `json:"latencyRTT,omitempty"`
}

// ConnectionStatus is the state of a Connection.
type ConnectionStatus string

// ConnectionStatus values.
const (
	Connected       ConnectionStatus = "connected"
	Connecting      ConnectionStatus = "connecting"
	ConnectionError ConnectionStatus = "error"
)

// LatencyRTTSpec is the round-trip time between two gateways, as durations
// in Go's notation ("1.2ms").
type LatencyRTTSpec struct {
	Last    string `json:"last,omitempty"`
	Min     string `json:"min,omitempty"`
	Average string `json:"average,omitempty"`
	Max     string `json:"max,omitempty"`
	StdDev  string `json:"stdDev,omitempty"`
}

// ClusterGlobalEgressIP sizes the cluster's egress pool: the global IPs pod
// traffic leaves with when no GlobalEgressIP applies. Globalnet uses the
// one named ClusterGlobalEgressIPName.
type ClusterGlobalEgressIP struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ClusterGlobalEgressIPSpec `json:"spec"`
	Status            GlobalEgressIPStatus      `json:"status,omitempty"`
}

// ClusterGlobalEgressIPName is the name of the ClusterGlobalEgressIP that
// counts.
const ClusterGlobalEgressIPName = "cluster-egress.submariner.io"

// ClusterGlobalEgressIPSpec asks for a number of global IPs: 0 to 20,
// default DefaultClusterEgressIPs.
type ClusterGlobalEgressIPSpec struct {
	NumberOfIPs *int `json:"numGlobalIPs,omitempty"`
}

// DefaultClusterEgressIPs is the cluster egress pool's default size.
const DefaultClusterEgressIPs = 8

// GlobalEgressIP gives the pods of its namespace (or those its podSelector
// picks) their own egress pool.
type GlobalEgressIP struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              GlobalEgressIPSpec   `json:"spec"`
	Status            GlobalEgressIPStatus `json:"status,omitempty"`
}

// GlobalEgressIPSpec asks for a number of global IPs (0 to 20, default 1)
// for the pods podSelector picks, or every pod of the namespace.
type GlobalEgressIPSpec struct {
	NumberOfIPs *int                  `json:"numberOfIPs,omitempty"`
	PodSelector *metav1.LabelSelector `json:"podSelector,omitempty"`
}

// GlobalEgressIPStatus is what the allocation gave.
type GlobalEgressIPStatus struct {
	Conditions   []metav1.Condition `json:"conditions,omitempty"`
	AllocatedIPs []string           `json:"allocatedIPs,omitempty"`
}

// Condition types of GlobalEgressIPStatus.
const (
	GlobalEgressIPAllocated = "Allocated"
	GlobalEgressIPUpdated   = "Updated"
)

// GlobalIngressIP is the global IP of an exported ClusterIP service, or of
// one pod of an exported headless service.
type GlobalIngressIP struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              GlobalIngressIPSpec   `json:"spec"`
	Status            GlobalIngressIPStatus `json:"status,omitempty"`
}

// GlobalIngressIPSpec names what the global IP leads to.
type GlobalIngressIPSpec struct {
	Target     TargetType                   `json:"target"`
	ServiceRef *corev1.LocalObjectReference `json:"serviceRef,omitempty"`
	PodRef     *corev1.LocalObjectReference `json:"podRef,omitempty"`
}

// TargetType is the kind of thing a GlobalIngressIP leads to.
type TargetType string

// TargetType values.
const (
	ClusterIPService   TargetType = "ClusterIPService"
	HeadlessServicePod TargetType = "HeadlessServicePod"
)

// GlobalIngressIPStatus is the allocated global IP.
type GlobalIngressIPStatus struct {
	Conditions  []metav1.Condition `json:"conditions,omitempty"`
	AllocatedIP string             `json:"allocatedIP,omitempty"`
}
