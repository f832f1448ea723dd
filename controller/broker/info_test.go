package broker

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// subctlFile is a broker-info.subm as subctl writes it: its struct tags
// are malformed, so the JSON keys are the Go field names (but brokerURL),
// and the whole is base64 with the URL alphabet. Secret data is base64 in
// JSON: "dG9rLTEyMw==" is "tok-123", "bXktY2E=" is "my-ca",
// "c3VibWFyaW5lci1rOHMtYnJva2Vy" is "submariner-k8s-broker".
const subctlJSON = `{"brokerURL":"https://broker.example:6443",` +
	`"ClientToken":{"metadata":{"name":"submariner-k8s-broker-admin-token-x7k2p","namespace":"submariner-k8s-broker",` +
	`"annotations":{"kubernetes.io/service-account.name":"submariner-k8s-broker-admin"}},` +
	`"data":{"ca.crt":"bXktY2E=","namespace":"c3VibWFyaW5lci1rOHMtYnJva2Vy","token":"dG9rLTEyMw=="},` +
	`"type":"kubernetes.io/service-account-token"},` +
	`"IPSecPSK":{"metadata":{"name":"submariner-ipsec-psk"},"data":{"psk":"%PSK%"}},` +
	`"ServiceDiscovery":true,"Components":["connectivity","service-discovery"],"CustomDomains":null}`

func TestDecodeInfoReadsSubctlFiles(t *testing.T) {
	psk := make([]byte, 48)
	for i := range psk {
		psk[i] = byte(7 * i)
	}
	j := strings.Replace(subctlJSON, "%PSK%", base64.StdEncoding.EncodeToString(psk), 1)
	old := strings.Replace(j, `"CustomDomains":null}`, `"CustomDomains":null,"GlobalnetCidrRange":"242.0.0.0/8","GlobalnetClusterSize":65536}`, 1)
	// '~' closing a 3-byte group encodes as '-' or '_' in the URL
	// alphabet, which the standard one cannot decode.
	tilde := strings.Replace(j, `"CustomDomains":null}`, `"CustomDomains":["~~~"]}`, 1)
	for _, tc := range []struct {
		name, content string
	}{
		{"current subctl", base64.URLEncoding.EncodeToString([]byte(j))},
		{"URL-alphabet characters", base64.URLEncoding.EncodeToString([]byte(tilde))},
		{"with a trailing newline", base64.URLEncoding.EncodeToString([]byte(j)) + "\n"},
		{"older subctl with Globalnet fields", base64.URLEncoding.EncodeToString([]byte(old))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), InfoFileName)
			if err := os.WriteFile(path, []byte(tc.content), 0o600); err != nil {
				t.Fatal(err)
			}
			in, err := ReadInfoFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if in.BrokerURL != "https://broker.example:6443" || in.Token() != "tok-123" || string(in.CA()) != "my-ca" ||
				in.Namespace() != "submariner-k8s-broker" {
				t.Errorf("decoded %q token %q ca %q ns %q", in.BrokerURL, in.Token(), in.CA(), in.Namespace())
			}
			if in.PSK() != base64.StdEncoding.EncodeToString(psk) {
				t.Errorf("PSK() = %q, want the base64 of the key bytes", in.PSK())
			}
			if !in.IsServiceDiscoveryEnabled() || !slices.Equal(in.Components, []string{"connectivity", "service-discovery"}) {
				t.Errorf("components %v, service discovery %v", in.Components, in.IsServiceDiscoveryEnabled())
			}
			cfg := in.RESTConfig()
			if cfg.Host != in.BrokerURL || cfg.BearerToken != "tok-123" || string(cfg.CAData) != "my-ca" {
				t.Errorf("RESTConfig() = host %q token %q ca %q", cfg.Host, cfg.BearerToken, cfg.CAData)
			}
		})
	}
}

func TestEncodeWritesSubctlKeysAndURLBase64(t *testing.T) {
	in := &Info{
		BrokerURL: "https://127.0.0.1:6443",
		ClientToken: &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "t"},
			Data:       map[string][]byte{tokenKey: []byte("tok"), caKey: []byte("ca"), namespaceKey: []byte("ns")},
		},
		IPSecPSK:         &corev1.Secret{Data: map[string][]byte{pskKey: []byte("0123456789abcdef0123456789abcdef")}},
		ServiceDiscovery: true,
		Components:       []string{ComponentConnectivity, ComponentServiceDiscovery},
		CustomDomains:    &[]string{"~~~"},
	}
	b, err := in.Encode()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.ContainsAny(string(b), "-_") {
		t.Errorf("%s: the '~' should have encoded as URL-alphabet '-' or '_'", b)
	}
	raw, err := base64.URLEncoding.DecodeString(string(b))
	if err != nil {
		t.Fatalf("not URL-alphabet padded base64, as subctl reads: %v", err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	want := []string{"ClientToken", "Components", "CustomDomains", "IPSecPSK", "ServiceDiscovery", "brokerURL"}
	if !slices.Equal(keys, want) {
		t.Errorf("JSON keys %v, want subctl's %v", keys, want)
	}
	back, err := DecodeInfo(b)
	if err != nil {
		t.Fatal(err)
	}
	if back.Token() != "tok" || back.Namespace() != "ns" || string(back.IPSecPSK.Data[pskKey]) != "0123456789abcdef0123456789abcdef" {
		t.Errorf("round trip lost data: %+v", back)
	}
}

func TestDecodeInfoRefusesBadFilesNamingTheField(t *testing.T) {
	enc := func(s string) []byte { return []byte(base64.URLEncoding.EncodeToString([]byte(s))) }
	for _, tc := range []struct {
		name    string
		content []byte
		want    string
	}{
		{"not base64", []byte("{not base64}"), "not base64"},
		{"not JSON", enc("hello"), "not the expected JSON"},
		{"no token", enc(`{"brokerURL":"https://b:6443","ClientToken":null,"IPSecPSK":{"data":{"psk":"cHNr"}}}`), "ClientToken is missing"},
		{"no namespace", enc(`{"brokerURL":"https://b:6443","ClientToken":{"data":{"token":"dA=="}},"IPSecPSK":{"data":{"psk":"cHNr"}}}`), "ClientToken.data.namespace"},
		{"no URL", enc(`{"ClientToken":{"data":{"token":"dA==","namespace":"bg=="}},"IPSecPSK":{"data":{"psk":"cHNr"}}}`), "brokerURL is empty"},
		{"no PSK", enc(`{"brokerURL":"https://b:6443","ClientToken":{"data":{"token":"dA==","namespace":"bg=="}}}`), "IPSecPSK.data.psk"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeInfo(tc.content)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("DecodeInfo: %v, want an error with %q", err, tc.want)
			}
		})
	}
}
