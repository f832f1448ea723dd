package broker

import (
	"bytes"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"

	"github.com/snorkel-net/snorkel/controller/api"
	"github.com/snorkel-net/snorkel/transport/esp/ike"
)

// InfoFileName is the name subctl and Snorkel give the broker information
// file by default.
const InfoFileName = "broker-info.subm"

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

// infoFix is what to do about a broker-info.subm that cannot be used.
const infoFix = "write the file again with `snorkel deploy-broker` (or `subctl deploy-broker`), or recover the one it wrote"

// DecodeInfo parses a broker-info.subm file's content and checks that it has
// what a member needs to join. Its errors name the file InfoFileName; see
// ReadInfoFile.
func DecodeInfo(data []byte) (*Info, error) {
	return decodeInfo(data, InfoFileName)
}

// ReadInfoFile reads and decodes a broker-info.subm file. Every error names
// path and, where one is to blame, the field.
func ReadInfoFile(path string) (*Info, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("broker info: %w", err)
	}
	return decodeInfo(b, path)
}

func decodeInfo(data []byte, name string) (*Info, error) {
	data = bytes.TrimSpace(data)
	var raw []byte
	var err error
	for _, enc := range []*base64.Encoding{base64.URLEncoding, base64.StdEncoding, base64.RawURLEncoding, base64.RawStdEncoding} {
		if raw, err = enc.DecodeString(string(data)); err == nil {
			break
		}
	}
	if err != nil {
		return nil, &infoError{file: name, problems: []error{fmt.Errorf("not a broker-info.subm file: its content is not base64 (%w)", err)}}
	}
	in := &Info{}
	if err := json.Unmarshal(raw, in); err != nil {
		return nil, &infoError{file: name, problems: []error{jsonFieldError(raw, err)}}
	}
	if errs := in.problems(); len(errs) > 0 {
		return nil, &infoError{file: name, problems: errs}
	}
	return in, nil
}

// infoError is what is wrong with a broker-info.subm file: each problem
// names its field.
type infoError struct {
	file     string
	problems []error
}

func (e *infoError) Error() string {
	lines := make([]string, len(e.problems))
	for i, p := range e.problems {
		lines[i] = e.file + ": " + p.Error()
	}
	return strings.Join(lines, "\n") + "; " + infoFix
}

func (e *infoError) Unwrap() []error { return e.problems }

// jsonFieldError names the field of raw that did not decode into an Info.
// encoding/json names it only for a type mismatch, not for bad base64 in a
// Secret's data, so each member is decoded alone until one fails, and
// within a Secret each data key.
func jsonFieldError(raw []byte, err error) error {
	var obj map[string]json.RawMessage
	if json.Unmarshal(raw, &obj) != nil {
		return fmt.Errorf("not a broker-info.subm file: its decoded content is not the expected JSON object (%w)", err)
	}
	for _, k := range slices.Sorted(maps.Keys(obj)) {
		one, _ := json.Marshal(map[string]json.RawMessage{k: obj[k]})
		ferr := json.Unmarshal(one, &Info{})
		if ferr == nil {
			continue
		}
		var secret struct {
			Data map[string]json.RawMessage `json:"data"`
		}
		if json.Unmarshal(obj[k], &secret) == nil {
			for _, dk := range slices.Sorted(maps.Keys(secret.Data)) {
				var b []byte
				if derr := json.Unmarshal(secret.Data[dk], &b); derr != nil {
					return fmt.Errorf("%s.data.%s: not base64 (%w)", k, dk, derr)
				}
			}
		}
		var te *json.UnmarshalTypeError
		if errors.As(ferr, &te) && te.Field != "" {
			return fmt.Errorf("%s: a JSON %s where a %s belongs", te.Field, te.Value, te.Type)
		}
		return fmt.Errorf("%s: %w", k, ferr)
	}
	return fmt.Errorf("not a broker-info.subm file: its decoded content is not the expected JSON (%w)", err)
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

// Validate checks that the fields a member needs to join are present and
// usable.
func (in *Info) Validate() error {
	if errs := in.problems(); len(errs) > 0 {
		return &infoError{file: "broker info", problems: errs}
	}
	return nil
}

// problems lists what is wrong with in, each naming its field. No secret
// value appears in them.
func (in *Info) problems() []error {
	var errs []error
	if in.BrokerURL == "" {
		errs = append(errs, errors.New("brokerURL: empty: the file does not say where the broker is"))
	} else if err := checkURL(in.BrokerURL); err != nil {
		errs = append(errs, fmt.Errorf("brokerURL: %q is not the URL of an API server (%v)", in.BrokerURL, err))
	}
	switch {
	case in.ClientToken == nil:
		errs = append(errs, errors.New("ClientToken: missing: the file holds no credentials for the broker"))
	default:
		token := in.ClientToken.Data[tokenKey]
		switch {
		case len(token) == 0:
			errs = append(errs, errors.New("ClientToken.data.token: empty: the file holds no credentials for the broker"))
		case bytes.ContainsFunc(token, func(r rune) bool { return r <= ' ' || r == 0x7f || r == utf8.RuneError }):
			errs = append(errs, errors.New("ClientToken.data.token: holds spaces or control characters, which a bearer token cannot"))
		}
		if ns := string(in.ClientToken.Data[namespaceKey]); ns == "" {
			errs = append(errs, errors.New("ClientToken.data.namespace: empty: the file does not name the broker namespace"))
		} else if msgs := validation.IsDNS1123Label(ns); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("ClientToken.data.namespace: %q is not a namespace name: %s", ns, strings.Join(msgs, "; ")))
		}
		if ca := in.ClientToken.Data[caKey]; len(ca) > 0 {
			if err := checkCA(ca); err != nil {
				errs = append(errs, fmt.Errorf("ClientToken.data.ca.crt: not a PEM certificate: %w", err))
			}
		}
	}
	switch {
	case in.IPSecPSK == nil || len(in.IPSecPSK.Data[pskKey]) == 0:
		errs = append(errs, errors.New("IPSecPSK.data.psk: empty: the file holds no pre-shared key for the clusterset"))
	default:
		if err := ike.CheckPSK([]byte(in.PSK())); err != nil {
			errs = append(errs, fmt.Errorf("IPSecPSK.data.psk: a %d-byte key is too short: its base64 form, which the gateways use, has %w", len(in.IPSecPSK.Data[pskKey]), err))
		}
	}
	return errs
}

// checkURL reports whether u can be a rest.Config's Host: an https or http
// URL, or a bare host:port, which client-go reads as https.
func checkURL(u string) error {
	if !strings.Contains(u, "://") {
		u = "https://" + u
	}
	p, err := url.Parse(u)
	switch {
	case err != nil:
		return err
	case p.Scheme != "https" && p.Scheme != "http":
		return fmt.Errorf("scheme %q, want https", p.Scheme)
	case p.Host == "":
		return errors.New("no host")
	}
	return nil
}

// checkCA reports whether ca is what client-go needs of CAData: PEM
// certificates, at least one, each of which parses.
func checkCA(ca []byte) error {
	n := 0
	for rest := ca; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			return fmt.Errorf("a PEM block of type %q, want CERTIFICATE", b.Type)
		}
		if _, err := x509.ParseCertificate(b.Bytes); err != nil {
			return err
		}
		n++
	}
	if n == 0 {
		return errors.New("no PEM block in it")
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
	return in.ServiceDiscovery || slices.Contains(in.Components, api.ComponentServiceDiscovery)
}

// RESTConfig is a client configuration for the broker with the file's token,
// trusting the file's CA (or the system's roots if it has none).
func (in *Info) RESTConfig() *rest.Config {
	return api.BrokerRESTConfig(in.BrokerURL, in.Token(), in.CA())
}
