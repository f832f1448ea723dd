// Package controller is Snorkel's control plane: it turns cluster state into
// the configuration of the gateway and of dnsd. The file-based source used by
// the lab lives here; the Kubernetes source joins it later.
package controller
