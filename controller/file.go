package controller

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/snorkel-net/snorkel/gateway"
)

// LoadGatewayConfig reads a gateway configuration file (YAML) and validates
// it.
func LoadGatewayConfig(path string) (gateway.Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return gateway.Config{}, fmt.Errorf("config: %w", err)
	}
	return ParseGatewayConfig(b, path)
}

// ParseGatewayConfig decodes and validates a gateway configuration; name
// labels errors. Unknown fields are refused, so that a misspelt key is not
// silently ignored.
func ParseGatewayConfig(b []byte, name string) (gateway.Config, error) {
	var cfg gateway.Config
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		return cfg, fmt.Errorf("config %s: %w (field names are listed in the README's gateway configuration section)", name, err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("config %s: %w", name, err)
	}
	return cfg, nil
}
