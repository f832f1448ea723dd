// Package api is the contract between the broker, the joined clusters'
// agents and the tools: the names of the namespaces, Secrets, labels and
// ConfigMaps that `snorkel deploy-broker` and `snorkel join` create and the
// agent, dnsd, `snorkel show` and the Calico tool read; the agent's
// configuration (AgentConfig) as the Secret holds it; and the checks of the
// values they share (cluster IDs, cable drivers, CIDRs). The CRD types are
// in api/v1.
//
// The names keep Submariner's where Submariner has one, so that its tools
// and Snorkel's read each other's clustersets. Nothing here keeps state;
// LoadAgentConfig talks to the API server synchronously.
package api
