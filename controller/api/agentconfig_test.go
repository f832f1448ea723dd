package api

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func baseAgentConfig() *AgentConfig {
	return &AgentConfig{
		ClusterID: "c1", BrokerURL: "https://broker:6443", BrokerNamespace: DefaultBrokerNamespace, BrokerToken: "t",
		PSK: "psk", CableDriver: "esp", ClusterCIDRs: []string{"10.8.0.0/16"}, ServiceCIDRs: []string{"10.88.0.0/16"},
	}
}

func TestAgentConfigKeepsTheJoinFlagsThroughTheSecret(t *testing.T) {
	c := baseAgentConfig()
	c.NATTraversalOff, c.NATTPort, c.PreferredServer, c.HealthCheckOff, c.AirGapped = true, 4600, true, true, true
	c.HealthCheckInterval, c.HealthCheckMaxPacketLossCount = 3, 7
	c.BrokerInsecure, c.Debug, c.LoadBalancer = true, true, true
	c.CoreDNSCustomConfigMap = "kube-system/coredns-custom"
	c.CustomDomains = []string{"supercluster.local", "example.org"}
	data := c.SecretData()
	for k, want := range map[string]string{
		"natTraversal": "false", "nattPort": "4600", "preferredServer": "true", "healthCheck": "false", "airGapped": "true",
		"healthCheckInterval": "3", "healthCheckMaxPacketLossCount": "7", "brokerInsecure": "true", "debug": "true", "loadBalancer": "true", "corednsCustomConfigMap": "kube-system/coredns-custom",
		"customDomains": "supercluster.local,example.org", AgentDNSZonesKey: "clusterset.local,supercluster.local,example.org",
	} {
		if got := string(data[k]); got != want {
			t.Errorf("data %q = %q, want %q", k, got, want)
		}
	}
	got, err := agentConfigFromSecret(&corev1.Secret{Data: data})
	if err != nil || !reflect.DeepEqual(got, c) {
		t.Errorf("read back %+v, %v; want %+v", got, err, c)
	}
}

func TestAgentConfigFromAnOlderSecretTakesSubctlDefaults(t *testing.T) {
	data := baseAgentConfig().SecretData()
	for _, k := range []string{"natTraversal", "nattPort", "preferredServer", "healthCheck", "customDomains", AgentDNSZonesKey, "airGapped", "healthCheckInterval", "healthCheckMaxPacketLossCount", "brokerInsecure", "debug", "loadBalancer"} {
		delete(data, k)
	}
	c, err := agentConfigFromSecret(&corev1.Secret{Data: data})
	if err != nil {
		t.Fatal(err)
	}
	if c.NATTraversalOff || c.Port() != 4500 || c.PreferredServer || c.HealthCheckOff || c.AirGapped || len(c.CustomDomains) != 0 || c.HealthInterval() != 1 || c.HealthMaxPacketLoss() != 5 || c.BrokerInsecure || c.Debug || c.LoadBalancer {
		t.Errorf("defaults: %+v", c)
	}
	if got := baseAgentConfig().SecretData(); string(got["natTraversal"]) != "true" || string(got["nattPort"]) != "4500" || string(got["healthCheck"]) != "true" || string(got[AgentDNSZonesKey]) != "clusterset.local" {
		t.Errorf("a default AgentConfig writes %q", got)
	}
}

func TestAgentConfigRefusesBadJoinSettings(t *testing.T) {
	for _, tc := range []struct {
		key, value, want string
	}{
		{"nattPort", "70000", `data "nattPort": "70000" is not a UDP port`},
		{"nattPort", "udp", `data "nattPort": "udp" is not a UDP port`},
		{"healthCheck", "yes please", `data "healthCheck": "yes please" is not true or false`},
		{"healthCheckInterval", "61", `data "healthCheckInterval": "61": --health-check-interval 61 is out of range: use 1 to 60`},
		{"healthCheckMaxPacketLossCount", "many", `data "healthCheckMaxPacketLossCount": "many"`},
		{"corednsCustomConfigMap", "kube-system/Bad_Name", `data "corednsCustomConfigMap": --coredns-custom-configmap "kube-system/Bad_Name": give [NAMESPACE/]NAME`},
		{"customDomains", "Bad_Domain", `data "customDomains": --custom-domains "Bad_Domain" is not a DNS domain`},
	} {
		data := baseAgentConfig().SecretData()
		data[tc.key] = []byte(tc.value)
		if _, err := agentConfigFromSecret(&corev1.Secret{Data: data}); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s=%q: %v, want %q", tc.key, tc.value, err, tc.want)
		}
	}
}

func TestValidateJoinGatewaySettingsNameTheFlag(t *testing.T) {
	for _, tc := range []struct {
		interval, loss int
		want           string
	}{
		{61, 5, "--health-check-interval 61 is out of range: use 1 to 60"},
		{-1, 5, "--health-check-interval -1 is out of range"},
		{1, 1001, "--health-check-max-packet-loss-count 1001 is out of range: use 1 to 1000"},
	} {
		if err := ValidateHealthCheck(tc.interval, tc.loss); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%d, %d: %v, want %q", tc.interval, tc.loss, err, tc.want)
		}
	}
	if err := ValidateHealthCheck(0, 0); err != nil {
		t.Errorf("the defaults: %v", err)
	}
	for _, port := range []int{0, -1, 65536} {
		if err := ValidateNATTPort(port); err == nil || !strings.Contains(err.Error(), "--nattport") {
			t.Errorf("port %d: %v", port, err)
		}
	}
	for _, tc := range []struct {
		domains []string
		want    string
	}{
		{[]string{"clusterset.local"}, "names \"clusterset.local\" twice, or names clusterset.local"},
		{[]string{"a.example", "a.example"}, "names \"a.example\" twice"},
		{[]string{"under_score.example"}, "is not a DNS domain"},
	} {
		if err := ValidateCustomDomains(tc.domains); err == nil || !strings.Contains(err.Error(), "--custom-domains") || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: %v, want %q", tc.domains, err, tc.want)
		}
	}
	if err := ValidateCustomDomains([]string{"supercluster.local", "example.org"}); err != nil {
		t.Error(err)
	}
}

func TestBrokerConfigChecksTheCertificateUnlessTold(t *testing.T) {
	c := baseAgentConfig()
	c.BrokerCA = []byte("-----BEGIN CERTIFICATE-----")
	if cfg := c.BrokerConfig(); cfg.Insecure || string(cfg.CAData) != string(c.BrokerCA) {
		t.Errorf("by default: insecure %v, CA %q; want the broker's CA checked", cfg.Insecure, cfg.CAData)
	}
	c.BrokerInsecure = true
	if cfg := c.BrokerConfig(); !cfg.Insecure || len(cfg.CAData) != 0 {
		t.Errorf("--check-broker-certificate=false: insecure %v, CA %q; want no check", cfg.Insecure, cfg.CAData)
	}
}

func TestParseCoreDNSCustomConfigMapDefaultsToKubeSystem(t *testing.T) {
	for in, want := range map[string]string{"coredns-custom": "kube-system/coredns-custom", "dns/custom.server": "dns/custom.server"} {
		if got, err := ParseCoreDNSCustomConfigMap(in); err != nil || got != want {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "a/b/c", "Kube_System/x", "/x"} {
		if got, err := ParseCoreDNSCustomConfigMap(bad); err == nil {
			t.Errorf("%q: %q, want an error", bad, got)
		}
	}
}
