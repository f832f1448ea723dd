// Package verify is `snorkel verify`, Snorkel's subctl verify: it checks
// that one cluster of a clusterset reaches another, by running the
// tutorial's connectivity and service-discovery checks as pods of
// Snorkel's own image. In a fresh namespace of the target cluster it runs
// two whereami servers (one on a gateway node, one on another node when
// there is one) behind a ClusterIP and a headless Service, and exports
// both; from a gateway node and a non-gateway node of the source cluster
// it runs one-shot `snorkel lab-pod fetch|resolve` pods, and reads each
// check's outcome from the pod's exit code and last log line. The
// namespaces are deleted at the end, also when a check or the run fails.
//
// Plan turns what is known of both clusters into the list of checks
// without touching them, so that it is tested without a cluster; Run
// does the rest from the calling goroutine, polling the pods, and prints
// a CHECK | FROM | TO | RESULT table.
package verify
