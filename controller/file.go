package controller

import (
	"fmt"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/snorkel-net/snorkel/gateway"
)

// LoadGatewayConfig reads a gateway configuration file (YAML) and validates
// it. Unknown fields are refused, so that a misspelt key is not silently
// ignored.
func LoadGatewayConfig(path string) (gateway.Config, error) {
	var cfg gateway.Config
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("config: %w", err)
	}
	if err := yaml.UnmarshalStrict(b, &cfg); err != nil {
		return cfg, fmt.Errorf("config %s: %w (field names are listed in the README's gateway configuration section)", path, err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}
