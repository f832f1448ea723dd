package show

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// writeKubeconfig writes a kubeconfig whose contexts map a context name to
// its cluster and user.
func writeKubeconfig(t *testing.T, contexts map[string][2]string) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	for name, cu := range contexts {
		cfg.Clusters[cu[0]] = &clientcmdapi.Cluster{Server: "https://" + cu[0] + ".example:6443"}
		cfg.AuthInfos[cu[1]] = &clientcmdapi.AuthInfo{Token: cu[1]}
		cfg.Contexts[name] = &clientcmdapi.Context{Cluster: cu[0], AuthInfo: cu[1]}
		cfg.CurrentContext = name
	}
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

func names(ts []Target) string {
	var s []string
	for _, t := range ts {
		s = append(s, t.Context+"@"+t.Cluster)
	}
	return strings.Join(s, " ")
}

func TestTargets(t *testing.T) {
	a := writeKubeconfig(t, map[string][2]string{
		"x-admin": {"x", "admin"}, "x-view": {"x", "viewer"}, "y-admin": {"y", "admin"},
		"z-one": {"z", "u1"}, "z-two": {"z", "u2"},
	})
	b := writeKubeconfig(t, map[string][2]string{"w": {"w", "w"}})

	t.Run("every cluster once, by the most used user, then by name", func(t *testing.T) {
		var status bytes.Buffer
		ts, header, err := Selection{Kubeconfig: a}.Targets(&status)
		if err != nil || !header {
			t.Fatalf("header %v, err %v", header, err)
		}
		if got := names(ts); got != "x-admin@x y-admin@y z-one@z" {
			t.Errorf("targets %s", got)
		}
		want := " ⚠ Found several kubeconfig contexts for cluster \"x\": x-admin, x-view; showing context \"x-admin\" (pick another with --context or --contexts)\n" +
			" ⚠ Found several kubeconfig contexts for cluster \"z\": z-one, z-two; showing context \"z-one\" (pick another with --context or --contexts)\n"
		if status.String() != want {
			t.Errorf("status %q, want %q", status.String(), want)
		}
		if ts[0].Config == nil || ts[0].Config.Host != "https://x.example:6443" || ts[0].Config.BearerToken != "admin" {
			t.Errorf("x-admin's config %+v", ts[0].Config)
		}
	})
	t.Run("--contexts in the order given; an unknown one is a target that says so", func(t *testing.T) {
		ts, header, err := Selection{Kubeconfig: a, Contexts: []string{"y-admin", "nope", "x-view"}}.Targets(&bytes.Buffer{})
		if err != nil || !header {
			t.Fatalf("header %v, err %v", header, err)
		}
		if got := names(ts); got != "y-admin@y nope@nope x-view@x" {
			t.Errorf("targets %s", got)
		}
		if ts[1].Err == nil || !strings.Contains(ts[1].Err.Error(), `no context named "nope"`) || ts[0].Err != nil {
			t.Errorf("errors %v, %v", ts[0].Err, ts[1].Err)
		}
	})
	t.Run("--context picks one, without a header", func(t *testing.T) {
		ts, header, err := Selection{Kubeconfig: a, Context: "x-view"}.Targets(&bytes.Buffer{})
		if err != nil || header || names(ts) != "x-view@x" || ts[0].Config.BearerToken != "viewer" {
			t.Errorf("targets %s, header %v, err %v", names(ts), header, err)
		}
	})
	t.Run("several files merge", func(t *testing.T) {
		ts, _, err := Selection{Kubeconfig: a + ":" + b}.Targets(&bytes.Buffer{})
		if err != nil || names(ts) != "w@w x-admin@x y-admin@y z-one@z" {
			t.Errorf("targets %s, err %v", names(ts), err)
		}
	})
	for _, tc := range []struct {
		name string
		sel  Selection
		want string
	}{
		{"an unknown --context", Selection{Kubeconfig: a, Context: "nope"}, `--context: no context named "nope" in --kubeconfig ` + a},
		{"--context with --contexts", Selection{Kubeconfig: a, Context: "x-view", Contexts: []string{"y-admin"}}, "give --context or --contexts, not both"},
		{"a missing file in a list", Selection{Kubeconfig: a + "," + a + ".missing"}, "--kubeconfig: stat " + a + ".missing"},
		{"a missing file", Selection{Kubeconfig: a + ".missing"}, "--kubeconfig " + a + ".missing: "},
	} {
		t.Run(tc.name+" is refused", func(t *testing.T) {
			_, _, err := tc.sel.Targets(&bytes.Buffer{})
			if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
				t.Errorf("err %v, want %q…", err, tc.want)
			}
		})
	}
}
