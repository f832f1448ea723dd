package servicesync

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// kubeconfigOf writes one kubeconfig with a context per member, named
// after it, the first current; a member's context has namespace
// namespaces[member] if given.
func kubeconfigOf(t *testing.T, namespaces map[string]string, members ...*member) string {
	t.Helper()
	merged := clientcmdapi.NewConfig()
	for _, m := range members {
		c, err := clientcmd.LoadFromFile(m.srv.Kubeconfig)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range c.Clusters {
			merged.Clusters[k] = v
		}
		for k, v := range c.AuthInfos {
			merged.AuthInfos[k] = v
		}
		for k, v := range c.Contexts {
			v.Namespace = namespaces[m.name]
			merged.Contexts[k] = v
		}
	}
	merged.CurrentContext = members[0].name
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*merged, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// testCLI exports and unexports c2's service through the commands, with
// a kubeconfig whose current context is c1's.
func testCLI(t *testing.T, cs *clusterset) {
	c1, c2 := cs.members["c1"], cs.members["c2"]
	cs.namespace(t, "cli", "c1", "c2", "c3")
	ip := c2.service(t, "cli", "web", "", 80).Spec.ClusterIP
	kubeconfig := kubeconfigOf(t, map[string]string{"c2": "cli"}, c1, c2)
	run := func(cmd func(ServiceCommand, io.Writer) error, c ServiceCommand) (string, error) {
		var out bytes.Buffer
		err := cmd(c, &out)
		return out.String(), err
	}
	export, unexport := RunExport, RunUnexport

	// The namespace comes from c2's context.
	out, err := run(export, ServiceCommand{Name: "web", Kubeconfig: kubeconfig, Context: "c2"})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "cli/web") || !strings.Contains(out, "web.cli.svc.clusterset.local") {
		t.Errorf("export said %q", out)
	}
	eventually(t, settle, "c1 imports the service the command exported", func() string {
		return clusterIPImport(t, c1, "cli", "web", map[string]string{"c2": ip}, false, "p80:80/TCP")
	})
	if out, err := run(export, ServiceCommand{Name: "web", Namespace: "cli", Kubeconfig: kubeconfig, Context: "c2"}); err != nil || !strings.Contains(out, "already exported") {
		t.Errorf("exporting again: %q, %v; want a note that it is already exported", out, err)
	}

	for _, tt := range []struct {
		name  string
		cmd   func(ServiceCommand, io.Writer) error
		args  ServiceCommand
		words []string
	}{
		{"the current context (c1) has no such service", export, ServiceCommand{Name: "web", Namespace: "cli", Kubeconfig: kubeconfig}, []string{"cli/web not found", "--context"}},
		{"an unknown context", export, ServiceCommand{Name: "web", Kubeconfig: kubeconfig, Context: "nope"}, []string{"--context nope"}},
		{"unexporting what is not exported", unexport, ServiceCommand{Name: "api", Namespace: "cli", Kubeconfig: kubeconfig, Context: "c2"}, []string{"cli/api is not exported"}},
	} {
		_, err := run(tt.cmd, tt.args)
		for _, w := range tt.words {
			if err == nil || !strings.Contains(err.Error(), w) {
				t.Errorf("%s: error %v does not mention %q", tt.name, err, w)
			}
		}
	}

	if out, err := run(unexport, ServiceCommand{Name: "web", Namespace: "cli", Kubeconfig: kubeconfig, Context: "c2"}); err != nil || !strings.Contains(out, "unexported") {
		t.Fatalf("unexport: %q, %v", out, err)
	}
	eventually(t, settle, "c1 forgets the service the command unexported", func() string { return nothingImported(t, c1, "cli", "web") })
}
