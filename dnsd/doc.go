// Package dnsd serves the clusterset.local zone: the DNS names of the
// services the clusterset exports, as Submariner's Lighthouse answers them
// and the Multi-Cluster Services DNS specification defines them.
//
// Names, under each served zone:
//
//	<svc>.<ns>.svc                     A/AAAA, SRV
//	<cluster>.<svc>.<ns>.svc           A/AAAA, SRV (that cluster only)
//	<host>.<cluster>.<svc>.<ns>.svc    A/AAAA (one pod of a headless service;
//	                                   a pod without a hostname is named by its
//	                                   address: 10-9-0-12, fd00-9--10)
//	_<port>._<proto>.<svc>.<ns>.svc    SRV (also with a <cluster> label)
//	dns-version                        TXT, the MCS schema version
//
// A ClusterSetIP service answers with one address: the local cluster's
// when it exports the service with a ready backend, else the next
// connected cluster with a ready backend, round-robin. A headless service
// answers with the ready pods of every connected cluster (all pods when
// the service publishes not-ready addresses). Names that do not exist get
// NXDOMAIN; names that exist with nothing healthy to return get an empty
// NOERROR answer; the empty non-terminals between the zone and a name
// (svc, <ns>.svc, _<proto>...) exist too, so that no resolver following
// RFC 8020 concludes a whole subtree is missing. Names outside the zones
// are refused, and query types other than A, AAAA, SRV, TXT and SOA get
// an authoritative NOTIMP, as Lighthouse answers them.
//
// A Server answers from its Store, which a feed (the controller's, or a
// static file) fills. Each change compiles an immutable table that queries
// read through one atomic pointer: queries take no lock and see a change
// whole. Answers are built in pooled replies whose records, buffers and
// name are reused, so that a query allocates little beyond what
// github.com/miekg/dns itself does; round-robin counters and the metrics'
// cached children are the only state a query writes, atomically.
//
// The package knows nothing of Kubernetes: it imports the standard
// library, github.com/miekg/dns and the Prometheus client only.
package dnsd
