// Package gather is `snorkel gather`: it writes, per cluster of a
// kubeconfig, what a Snorkel problem report needs into a directory laid out
// as subctl's gather lays it out: one YAML file per object
// (RESOURCE_NAMESPACE_NAME.yaml), one file per pod log (POD.log, and
// POD.log.prev for the previous container), and, from the gateways and dnsd,
// what their listeners serve (POD.status.json, POD.flows.json,
// POD.metrics.txt), read through the API server's port forwarding because the
// gateway's debug listener is on its node's loopback.
//
// A component that is missing, or whose pods are not running, is reported
// with a ⚠ line saying why and the gather goes on; summary.txt in each
// cluster's directory keeps the same lines. Secrets keep their keys and lose
// their values, and the broker token and pre-shared key are scrubbed from
// every file, unless Options.IncludeSensitiveData.
//
// Run works from the calling goroutine, one cluster and one request at a
// time; nothing is written to any cluster.
package gather
