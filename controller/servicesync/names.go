package servicesync

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	discoveryv1 "k8s.io/api/discovery/v1"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

// Labels and annotations on what the Syncer writes. The keys and values
// are Lighthouse's, so that Lighthouse-aware tools and dnsd read them
// unchanged.
const (
	// LabelServiceName names the exported Service (MCS).
	LabelServiceName = mcsv1a1.LabelServiceName
	// LabelSourceCluster is the ID of the cluster that exports (MCS).
	LabelSourceCluster = mcsv1a1.LabelSourceCluster
	// LabelSourceNamespace is the exported Service's namespace; on the
	// broker every object lives in the broker's namespace instead.
	LabelSourceNamespace = "lighthouse.submariner.io/sourceNamespace"
	// LabelIsHeadless is "true" on the EndpointSlices of a headless
	// service, "false" on a ClusterIP service's.
	LabelIsHeadless = "lighthouse.submariner.io/is-headless"
	// LabelSourceName is, on a headless service's EndpointSlice, the name
	// of the cluster's own EndpointSlice it was made from.
	LabelSourceName = "lighthouse.submariner.io/source-name"
	// LabelManagedBy marks the imported ServiceImports the Syncer owns;
	// EndpointSlices carry discoveryv1.LabelManagedBy instead.
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedBy is the value of both managed-by labels.
	ManagedBy = "lighthouse-agent.submariner.io"

	// AnnotationPublishNotReady copies the Service's
	// publishNotReadyAddresses ("true" or "false").
	AnnotationPublishNotReady = "lighthouse.submariner.io/publish-not-ready-addresses"
	// AnnotationGlobalnet is "true" on a headless service's EndpointSlice
	// whose addresses are the pods' global IPs.
	AnnotationGlobalnet = "lighthouse.submariner.io/globalnet-enabled"
	// AnnotationTimestampPrefix, followed by the cluster ID, holds the
	// ServiceExport's creation time (Unix nanoseconds) on that cluster's
	// ServiceImport on the broker: the oldest export wins a conflict, as
	// the MCS spec orders it.
	AnnotationTimestampPrefix = "timestamp.submariner.io/"
)

// sliceManagedBy selects the EndpointSlices the Syncer writes, on the
// broker and in members.
var sliceManagedBy = discoveryv1.LabelManagedBy + "=" + ManagedBy

// key is a workqueue item and an index value: "namespace/name".
func key(namespace, name string) string { return namespace + "/" + name }

// splitKey undoes key.
func splitKey(k string) (namespace, name string) {
	namespace, name, _ = strings.Cut(k, "/")
	return namespace, name
}

// brokerImportName is the name of a cluster's ServiceImport on the broker,
// Lighthouse's "<service>-<namespace>-<cluster>".
func brokerImportName(namespace, name, clusterID string) string {
	return name + "-" + namespace + "-" + clusterID
}

// sliceName names an EndpointSlice the Syncer publishes: the service's
// name and a digest of what makes it unique in the broker's namespace,
// where every cluster's slices of every namespace meet. The name is the
// same on the broker and in every member. It never ends in "-<cluster>",
// which Lighthouse reads as a pre-0.16 slice.
func sliceName(clusterID, namespace, name, source string) string {
	sum := sha256.Sum256([]byte(clusterID + "\x00" + namespace + "\x00" + name + "\x00" + source))
	return name + "-" + hex.EncodeToString(sum[:5])
}

// serviceKeyOfLabels is the "namespace/name" of the exported Service an
// object published by the Syncer belongs to, from its labels.
func serviceKeyOfLabels(labels map[string]string) (string, bool) {
	ns, name := labels[LabelSourceNamespace], labels[LabelServiceName]
	if ns == "" || name == "" {
		return "", false
	}
	return key(ns, name), true
}
