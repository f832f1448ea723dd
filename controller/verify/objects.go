package verify

import (
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	mcsv1a1 "sigs.k8s.io/mcs-api/pkg/apis/v1alpha1"
)

// Names of the objects verify creates in its namespaces.
const (
	serverName   = "whereami"
	serviceName  = "whereami-cs"
	headlessName = "whereami-ss"
	// appLabel marks verify's pods: appServer the servers', appCheck the
	// check pods'.
	appLabel  = "app"
	appServer = "whereami"
	appCheck  = "snorkel-verify-check"
	// podIPEnv and podNameEnv are the downward-API variables the pods'
	// arguments use.
	podIPEnv   = "POD_IP"
	podNameEnv = "POD_NAME"
	// nonRootUser runs the pods, which need no privilege.
	nonRootUser = 65532
)

func namespace(name string) *corev1.Namespace {
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/managed-by": "snorkel-verify"}}}
}

// services are the ClusterIP and the headless Service in front of the
// servers.
func services(ns string) []*corev1.Service {
	svc := func(name string, port int32, headless bool) *corev1.Service {
		s := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.ServiceSpec{
				Selector: map[string]string{appLabel: appServer},
				Ports:    []corev1.ServicePort{{Name: "http", Port: port, TargetPort: intstr.FromInt32(serverPort)}},
			},
		}
		if headless {
			s.Spec.ClusterIP = corev1.ClusterIPNone
		}
		return s
	}
	return []*corev1.Service{svc(serviceName, servicePort, false), svc(headlessName, serverPort, true)}
}

func serviceExport(ns, name string) *mcsv1a1.ServiceExport {
	return &mcsv1a1.ServiceExport{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}}
}

// serverStatefulSet is two whereami servers, spread over c's gateway node
// and its other node (both on the gateway node when it has no other), as
// a StatefulSet so that they have hostnames under the headless Service.
func serverStatefulSet(ns, image string, c Cluster) *appsv1.StatefulSet {
	labels := map[string]string{appLabel: appServer}
	// A node field selector takes one name: one term, ORed, per node.
	var terms []corev1.NodeSelectorTerm
	for _, n := range c.Nodes() {
		terms = append(terms, corev1.NodeSelectorTerm{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{n.Name}}},
		})
	}
	return &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: serverName, Namespace: ns},
		Spec: appsv1.StatefulSetSpec{
			Replicas:            new(int32(2)),
			ServiceName:         headlessName,
			PodManagementPolicy: appsv1.ParallelPodManagement,
			Selector:            &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					Affinity: &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms},
					}},
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: corev1.LabelHostname, WhenUnsatisfiable: corev1.DoNotSchedule,
						LabelSelector: &metav1.LabelSelector{MatchLabels: labels},
					}},
					Containers: []corev1.Container{{
						Name:  "whereami",
						Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
						Args:  []string{"lab-pod", "whereami", "--name=$(" + podNameEnv + ")", "--cluster=" + c.ID, fmt.Sprintf("--listen=:%d", serverPort)},
						Env:   []corev1.EnvVar{fieldEnv(podNameEnv, "metadata.name")},
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: serverPort}},
						ReadinessProbe: &corev1.Probe{
							ProbeHandler:  corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/", Port: intstr.FromInt32(serverPort)}},
							PeriodSeconds: 2,
						},
					}},
					TerminationGracePeriodSeconds: new(int64(1)),
					AutomountServiceAccountToken:  new(false),
					EnableServiceLinks:            new(false),
					SecurityContext:               &corev1.PodSecurityContext{RunAsNonRoot: new(true), RunAsUser: new(int64(nonRootUser))},
				},
			},
		},
	}
}

// checkPod is one check, run once on its node.
func checkPod(ns, name, image string, c Check) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{appLabel: appCheck}},
		Spec: corev1.PodSpec{
			NodeName:      c.Node.Name,
			RestartPolicy: corev1.RestartPolicyNever,
			Containers: []corev1.Container{{
				Name:  "check",
				Image: image, ImagePullPolicy: corev1.PullIfNotPresent,
				Args: c.Args,
				Env:  []corev1.EnvVar{fieldEnv(podIPEnv, "status.podIP")},
			}},
			TerminationGracePeriodSeconds: new(int64(1)),
			AutomountServiceAccountToken:  new(false),
			EnableServiceLinks:            new(false),
			SecurityContext:               &corev1.PodSecurityContext{RunAsNonRoot: new(true), RunAsUser: new(int64(nonRootUser))},
		},
	}
}

func fieldEnv(name, path string) corev1.EnvVar {
	return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
}
