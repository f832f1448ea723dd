package broker

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/snorkel-net/snorkel/controller/api"
)

// subctlFile is a broker-info.subm as subctl writes it: its struct tags
// are malformed, so the JSON keys are the Go field names (but brokerURL),
// and the whole is base64 with the URL alphabet. Secret data is base64 in
// JSON: "dG9rLTEyMw==" is "tok-123", "c3VibWFyaW5lci1rOHMtYnJva2Vy" is
// "submariner-k8s-broker"; %CA% stands for testCA's.
const subctlJSON = `{"brokerURL":"https://broker.example:6443",` +
	`"ClientToken":{"metadata":{"name":"submariner-k8s-broker-admin-token-x7k2p","namespace":"submariner-k8s-broker",` +
	`"annotations":{"kubernetes.io/service-account.name":"submariner-k8s-broker-admin"}},` +
	`"data":{"ca.crt":"%CA%","namespace":"c3VibWFyaW5lci1rOHMtYnJva2Vy","token":"dG9rLTEyMw=="},` +
	`"type":"kubernetes.io/service-account-token"},` +
	`"IPSecPSK":{"metadata":{"name":"submariner-ipsec-psk"},"data":{"psk":"%PSK%"}},` +
	`"ServiceDiscovery":true,"Components":["connectivity","service-discovery"],"CustomDomains":null}`

// testCA is a self-signed CA certificate in PEM, as a broker's ca.crt.
func testCA(t *testing.T) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "broker-ca"},
		NotBefore: time.Now(), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestDecodeInfoReadsSubctlFiles(t *testing.T) {
	psk := make([]byte, 48)
	for i := range psk {
		psk[i] = byte(7 * i)
	}
	ca := testCA(t)
	j := strings.NewReplacer("%PSK%", base64.StdEncoding.EncodeToString(psk), "%CA%", base64.StdEncoding.EncodeToString(ca)).Replace(subctlJSON)
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
			if in.BrokerURL != "https://broker.example:6443" || in.Token() != "tok-123" || !bytes.Equal(in.CA(), ca) ||
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
			if cfg.Host != in.BrokerURL || cfg.BearerToken != "tok-123" || !bytes.Equal(cfg.CAData, ca) {
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
			Data:       map[string][]byte{tokenKey: []byte("tok"), caKey: testCA(t), namespaceKey: []byte("ns")},
		},
		IPSecPSK:         &corev1.Secret{Data: map[string][]byte{pskKey: []byte("0123456789abcdef0123456789abcdef")}},
		ServiceDiscovery: true,
		Components:       []string{api.ComponentConnectivity, api.ComponentServiceDiscovery},
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
		{"no token", enc(`{"brokerURL":"https://b:6443","ClientToken":null,"IPSecPSK":{"data":{"psk":"cHNr"}}}`), "ClientToken: missing"},
		{"no namespace", enc(`{"brokerURL":"https://b:6443","ClientToken":{"data":{"token":"dA=="}},"IPSecPSK":{"data":{"psk":"cHNr"}}}`), "ClientToken.data.namespace"},
		{"no URL", enc(`{"ClientToken":{"data":{"token":"dA==","namespace":"bg=="}},"IPSecPSK":{"data":{"psk":"cHNr"}}}`), "brokerURL: empty"},
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

// TestReadInfoFileNamesTheFileAndTheFieldOfGarbage puts garbage in each
// field of a good file in turn: the error must name the file, the field and
// the fix, and never a secret.
func TestReadInfoFileNamesTheFileAndTheFieldOfGarbage(t *testing.T) {
	const token, psk = "tok-secret-123", "psk-secret-0123456789abcdef"
	b64 := func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
	good := func() map[string]any {
		return map[string]any{
			"brokerURL": "https://broker.example:6443",
			"ClientToken": map[string]any{
				"metadata": map[string]any{"name": "submariner-k8s-broker-admin-token"},
				"data":     map[string]any{"token": b64(token), "namespace": b64("submariner-k8s-broker"), "ca.crt": base64.StdEncoding.EncodeToString(testCA(t))},
			},
			"IPSecPSK":         map[string]any{"data": map[string]any{"psk": b64(psk)}},
			"ServiceDiscovery": true,
			"Components":       []string{"connectivity"},
			"CustomDomains":    nil,
		}
	}
	data := func(m map[string]any, secret string) map[string]any {
		return m[secret].(map[string]any)["data"].(map[string]any)
	}
	for _, tc := range []struct {
		name, field string
		garble      func(m map[string]any)
	}{
		{"URL with another scheme", "brokerURL", func(m map[string]any) { m["brokerURL"] = "ftp://broker.example" }},
		{"URL without a host", "brokerURL", func(m map[string]any) { m["brokerURL"] = "https://" }},
		{"URL of the wrong JSON type", "brokerURL", func(m map[string]any) { m["brokerURL"] = 6443 }},
		{"token Secret of the wrong JSON type", "ClientToken", func(m map[string]any) { m["ClientToken"] = "token" }},
		{"token Secret metadata of the wrong JSON type", "ClientToken.metadata.name", func(m map[string]any) {
			m["ClientToken"].(map[string]any)["metadata"] = map[string]any{"name": 5}
		}},
		{"token not base64", "ClientToken.data.token", func(m map[string]any) { data(m, "ClientToken")["token"] = "!!" + token }},
		{"token with a newline", "ClientToken.data.token", func(m map[string]any) { data(m, "ClientToken")["token"] = b64(token + "\n" + token) }},
		{"namespace not base64", "ClientToken.data.namespace", func(m map[string]any) { data(m, "ClientToken")["namespace"] = "%%%" }},
		{"namespace not a name", "ClientToken.data.namespace", func(m map[string]any) { data(m, "ClientToken")["namespace"] = b64("Broker_NS") }},
		{"CA not base64", "ClientToken.data.ca.crt", func(m map[string]any) { data(m, "ClientToken")["ca.crt"] = "not base64!" }},
		{"CA not PEM", "ClientToken.data.ca.crt: not a PEM certificate", func(m map[string]any) { data(m, "ClientToken")["ca.crt"] = b64("garbage") }},
		{"CA a PEM key", "ClientToken.data.ca.crt: not a PEM certificate", func(m map[string]any) {
			data(m, "ClientToken")["ca.crt"] = b64(string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: []byte("k")})))
		}},
		{"CA a PEM certificate of garbage", "ClientToken.data.ca.crt: not a PEM certificate", func(m map[string]any) {
			data(m, "ClientToken")["ca.crt"] = b64(string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: []byte("garbage")})))
		}},
		{"PSK Secret of the wrong JSON type", "IPSecPSK", func(m map[string]any) { m["IPSecPSK"] = []int{1} }},
		{"PSK not base64", "IPSecPSK.data.psk", func(m map[string]any) { data(m, "IPSecPSK")["psk"] = "!!" + psk }},
		{"PSK too short", "IPSecPSK.data.psk", func(m map[string]any) { data(m, "IPSecPSK")["psk"] = b64("psk") }},
		{"service discovery not a bool", "ServiceDiscovery", func(m map[string]any) { m["ServiceDiscovery"] = "yes" }},
		{"components not a list", "Components", func(m map[string]any) { m["Components"] = "connectivity" }},
		{"custom domains not a list", "CustomDomains", func(m map[string]any) { m["CustomDomains"] = map[string]int{"a": 1} }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := good()
			tc.garble(m)
			j, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(t.TempDir(), InfoFileName)
			if err := os.WriteFile(path, []byte(base64.URLEncoding.EncodeToString(j)), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err = ReadInfoFile(path)
			if err == nil {
				t.Fatal("ReadInfoFile accepted the file")
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, path+": "+tc.field) {
				t.Errorf("error does not start with %q:\n%s", path+": "+tc.field, msg)
			}
			if !strings.Contains(msg, "deploy-broker") {
				t.Errorf("error does not say how to fix it:\n%s", msg)
			}
			for _, secret := range []string{token, psk, b64(token), b64(psk)} {
				if strings.Contains(msg, secret) {
					t.Errorf("error shows a secret:\n%s", msg)
				}
			}
		})
	}
}
