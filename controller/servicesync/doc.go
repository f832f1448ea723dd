// Package servicesync is the Multi-Cluster Services part of Snorkel's
// agent, the job Lighthouse's agent does for Submariner: one Syncer per
// member cluster exports the services that have a ServiceExport through
// the broker and imports every exporting cluster's into the cluster.
//
// What it writes, in Lighthouse's formats (dnsd and Lighthouse-aware tools
// read them unchanged):
//
//   - On the broker, per exporting cluster and service: a ServiceImport
//     "<service>-<namespace>-<cluster>" with that cluster's type, ports and
//     address (spec.ips: the ClusterIP, or its global IP under Globalnet),
//     labelled multicluster.kubernetes.io/service-name,
//     lighthouse.submariner.io/sourceNamespace and
//     multicluster.kubernetes.io/source-cluster, and annotated with the
//     ServiceExport's creation time (timestamp.submariner.io/<cluster>);
//     and its EndpointSlices, labelled the same and
//     endpointslice.kubernetes.io/managed-by=lighthouse-agent.submariner.io
//     and lighthouse.submariner.io/is-headless. A ClusterIP service has
//     one slice with one endpoint, its address, ready when any backend is;
//     a headless service has a slice per own EndpointSlice with the pods'
//     endpoints and hostnames.
//   - In every member (the exporting ones too) whose namespace of the
//     service exists: a copy of each exporting cluster's slices in the
//     service's namespace, and a ServiceImport named like the service
//     (labelled app.kubernetes.io/managed-by=lighthouse-agent.submariner.io)
//     with the first exporter's type, the ports merged by name, and
//     status.clusters listing the clusters whose endpoints are imported.
//   - Clusterset IPs (Lighthouse's use-clusterset-ip): the oldest export of
//     a ClusterSetIP service decides whether it has a VIP (the ServiceExport's
//     lighthouse.submariner.io/use-clusterset-ip annotation, else the
//     cluster's default); that cluster allocates it from its block
//     (Config.ClustersetIP) and every exporter that agrees carries it on its
//     broker ServiceImport (snorkel.io/clusterset-ip, with
//     lighthouse.submariner.io/clusterset-ip-allocated-by), so it outlives
//     the allocator's export. Members put it in the merged ServiceImport's
//     spec.ips. It is freed when no cluster exports the service; a Syncer
//     takes its VIPs back from the broker when it starts.
//   - On each ServiceExport: Valid (False with ServiceUnavailable,
//     UnsupportedServiceType or, under Globalnet, ServiceGlobalIPUnavailable;
//     True with ClusterSetIPUnavailable when a clusterset IP it asks for
//     cannot be given), Ready (Exported, or ExportFailed) and Conflict
//     (ConflictingType, ConflictingPorts, ConflictingClusterSetIPEnablement,
//     or NoConflicts).
//
// Nothing is garbage-collected by owner: unexporting, deleting the
// Service, or a cluster leaving (RemoveCluster) deletes the broker's
// objects explicitly, and each member deletes its copies when the
// broker's go.
//
// Under Globalnet, GlobalIPs gives the addresses to publish, and Resync
// is how the IPAM says one changed. RunExport and RunUnexport are the
// snorkel export and unexport commands.
//
// Concurrency: informers feed two work queues keyed by "namespace/name",
// exports and imports, each drained by Config.Workers goroutines; a key
// is reconciled by one goroutine at a time, from the informer caches, and
// only differences are written. Resync is safe from any goroutine.
package servicesync
