package broker

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
)

// InfoFileName is the name subctl and Snorkel give the broker information
// file by default.
const InfoFileName = "broker-info.subm"

// Components a broker can offer, as subctl names them in Info.Components.
const (
	ComponentConnectivity     = "connectivity"
	ComponentServiceDiscovery = "service-discovery"
	ComponentGlobalnet        = "globalnet"
)

// Keys of the ClientToken and IPSecPSK Secrets.
const (
	tokenKey     = "token"
	caKey        = "ca.crt"
	namespaceKey = "namespace"
	pskKey       = "psk"
)

// Info is the content of a broker-info.subm file: where the broker is, the
// credentials a member joins with, and the clusterset's IPsec pre-shared key.
//
// The JSON keys are subctl's: its struct tags are malformed, so
// encoding/json uses the Go field names for all but brokerURL. Fields that
// older subctl versions wrote (GlobalnetCidrRange, GlobalnetClusterSize,
// since moved to the broker's Globalnet ConfigMap) are ignored on reading.
type Info struct {
	BrokerURL string `json:"brokerURL"`
	// ClientToken carries data "token", "ca.crt" and "namespace" (the
	// broker namespace), as a ServiceAccount token Secret does.
	ClientToken *corev1.Secret `json:"ClientToken"`
	// IPSecPSK carries data "psk": the raw pre-shared key bytes.
	IPSecPSK         *corev1.Secret `json:"IPSecPSK"`
	ServiceDiscovery bool           `json:"ServiceDiscovery"`
	Components       []string       `json:"Components,omitempty"`
	CustomDomains    *[]string      `json:"CustomDomains"`
}

// Encode returns the file's content: the base64 (URL alphabet, padded) of
// the JSON, as subctl writes it.
func (in *Info) Encode() ([]byte, error) {
	j, err := json.Marshal(in)
	if err != nil {
		return nil, fmt.Errorf("broker info: %w", err)
	}
	out := make([]byte, base64.URLEncoding.EncodedLen(len(j)))
	base64.URLEncoding.Encode(out, j)
	return out, nil
}

// DecodeInfo parses a broker-info.subm file's content and checks that it has
// what a member needs to join.
func DecodeInfo(data []byte) (*Info, error) {
	data = bytes.TrimSpace(data)
	var raw []byte
	var err error
	for _, enc := range []*base64.Encoding{base64.URLEncoding, base64.StdEncoding, base64.RawURLEncoding, base64.RawStdEncoding} {
		if raw, err = enc.DecodeString(string(data)); err == nil {
			break
		}
	}
	if err != nil {
		return nil, fmt.Errorf("not a broker-info.subm file: its content is not base64 (%w); use the file `snorkel deploy-broker` or `subctl deploy-broker` wrote", err)
	}
	in := &Info{}
	if err := json.Unmarshal(raw, in); err != nil {
		return nil, fmt.Errorf("not a broker-info.subm file: its decoded content is not the expected JSON (%w); use the file `snorkel deploy-broker` or `subctl deploy-broker` wrote", err)
	}
	if err := in.Validate(); err != nil {
		return nil, err
	}
	return in, nil
}

// ReadInfoFile reads and decodes a broker-info.subm file.
func ReadInfoFile(path string) (*Info, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("broker info: %w", err)
	}
	in, err := DecodeInfo(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return in, nil
}

// WriteFile writes the encoded Info to path, readable by its owner only: it
// holds the broker token and the pre-shared key.
func (in *Info) WriteFile(path string) error {
	b, err := in.Encode()
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return fmt.Errorf("broker info: %w", err)
	}
	// WriteFile keeps the mode of a file that already existed.
	if err := os.Chmod(path, 0o600); err != nil {
		return fmt.Errorf("broker info: %w", err)
	}
	return nil
}

// Validate checks that the fields a member needs to join are present.
func (in *Info) Validate() error {
	var errs []error
	if in.BrokerURL == "" {
		errs = append(errs, errors.New("brokerURL is empty: the file does not say where the broker is"))
	}
	switch {
	case in.ClientToken == nil:
		errs = append(errs, errors.New("ClientToken is missing: the file holds no credentials for the broker"))
	default:
		if len(in.ClientToken.Data[tokenKey]) == 0 {
			errs = append(errs, errors.New("ClientToken.data.token is empty: the file holds no credentials for the broker"))
		}
		if len(in.ClientToken.Data[namespaceKey]) == 0 {
			errs = append(errs, errors.New("ClientToken.data.namespace is empty: the file does not name the broker namespace"))
		}
	}
	if in.IPSecPSK == nil || len(in.IPSecPSK.Data[pskKey]) == 0 {
		errs = append(errs, errors.New("IPSecPSK.data.psk is empty: the file holds no pre-shared key for the clusterset"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("broker info: %w; write the file again with `snorkel deploy-broker`", errors.Join(errs...))
	}
	return nil
}

// Namespace is the broker namespace.
func (in *Info) Namespace() string { return string(in.ClientToken.Data[namespaceKey]) }

// Token is the broker client's bearer token.
func (in *Info) Token() string { return string(in.ClientToken.Data[tokenKey]) }

// CA is the PEM certificate the broker's serving certificate chains to, if
// the file carries one.
func (in *Info) CA() []byte { return in.ClientToken.Data[caKey] }

// PSK is the clusterset's pre-shared key as Submariner's gateways use it:
// the base64 (standard alphabet) of the raw key bytes.
func (in *Info) PSK() string { return base64.StdEncoding.EncodeToString(in.IPSecPSK.Data[pskKey]) }

// IsServiceDiscoveryEnabled reports whether the broker offers service
// discovery, by either of the ways subctl records it.
func (in *Info) IsServiceDiscoveryEnabled() bool {
	return in.ServiceDiscovery || slices.Contains(in.Components, ComponentServiceDiscovery)
}

// RESTConfig is a client configuration for the broker with the file's token,
// trusting the file's CA (or the system's roots if it has none).
func (in *Info) RESTConfig() *rest.Config {
	return brokerRESTConfig(in.BrokerURL, in.Token(), in.CA())
}

func brokerRESTConfig(url, token string, ca []byte) *rest.Config {
	return &rest.Config{
		Host:            url,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: ca},
		UserAgent:       "snorkel",
		// Joins racing for the Globalnet ConfigMap retry in bursts.
		QPS:   50,
		Burst: 100,
	}
}
