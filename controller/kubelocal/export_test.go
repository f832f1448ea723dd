package kubelocal

// What kubelocal_test, an external test package so that it can use
// kubetest, checks of the internals.
var (
	Exited     = exited
	StartChild = startChild
)

// Processes are the server's API server and etcd.
func (s *Server) Processes() (api, etcd Process) { return s.api, s.etcd }

// StateDir is the directory the server keeps its files in.
func (s *Server) StateDir() string { return s.dir }
