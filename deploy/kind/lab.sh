#!/usr/bin/env bash
# The Submariner tutorial on Kind, with Snorkel: a broker cluster, c1 and c2
# (pods 10.8.0.0/16 and 10.9.0.0/16, services 10.88.0.0/16 and
# 10.99.0.0/16), and the Globalnet pair g1 and g2 (both pods 10.7.0.0/16,
# services 10.77.0.0/16). It deploys the broker, joins the members (which
# runs the agent and dnsd in each), exports the tutorial's services from c2
# and g2, and checks from a pod in c1 and in g1 what the netns lab checks:
# names under clusterset.local, HTTP to the services and to a pod, ping.
#
#   deploy/kind/lab.sh [run|up|demo|down|check]
#
#   run   up, then demo (the default); the clusters stay for exploring
#   up    create the clusters (or reuse them), deploy and export
#   demo  run the checks; exits non-zero if one fails
#   down  delete the clusters and the lab's state
#   check only say whether the tools the lab needs are here
#
# Needs docker, kind and kubectl, bin/snorkel (make build) and the image
# (make image). Settings from the environment: IMAGE (default
# ghcr.io/snorkel-net/snorkel:dev), CABLE_DRIVER (wireguard, esp or vxlan;
# default wireguard), CLIENT_IMAGE (the checks' pod, with curl, dig and ping;
# default nicolaka/netshoot:v0.13), KIND_NODE_IMAGE (kind's default if
# unset), SNORKEL (default bin/snorkel), STATE (default .cache/kind-lab).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
IMAGE=${IMAGE:-ghcr.io/snorkel-net/snorkel:dev}
CABLE_DRIVER=${CABLE_DRIVER:-wireguard}
CLIENT_IMAGE=${CLIENT_IMAGE:-nicolaka/netshoot:v0.13}
KIND_NODE_IMAGE=${KIND_NODE_IMAGE:-}
SNORKEL=${SNORKEL:-$root/bin/snorkel}
STATE=${STATE:-$root/.cache/kind-lab}
KUBECONFIG_FILE=$STATE/kubeconfig

# The clusters, their CIDRs, and the broker namespace each joins through.
BROKER=broker
MEMBERS=(c1 c2 g1 g2)
declare -A POD_CIDR=([c1]=10.8.0.0/16 [c2]=10.9.0.0/16 [g1]=10.7.0.0/16 [g2]=10.7.0.0/16)
declare -A SERVICE_CIDR=([c1]=10.88.0.0/16 [c2]=10.99.0.0/16 [g1]=10.77.0.0/16 [g2]=10.77.0.0/16)
declare -A BROKER_NS=([c1]=submariner-k8s-broker [c2]=submariner-k8s-broker [g1]=submariner-k8s-broker-globalnet [g2]=submariner-k8s-broker-globalnet)
GLOBALNET_RANGE=242.0.0.0/8

# How long the demo waits for a name to resolve or a request to succeed:
# service exports, CoreDNS reloading its Corefile and the first tunnel
# handshake take tens of seconds on a fresh lab.
CHECK_DEADLINE=${CHECK_DEADLINE:-120}

say() { printf '%s\n' "$*"; }
die() {
	printf 'kind-lab: %s\n' "$*" >&2
	exit 1
}

# check_tools says everything that is missing at once, then fails.
check_tools() {
	local missing=()
	if ! command -v docker >/dev/null 2>&1; then
		missing+=("docker: not installed; Kind runs its clusters as Docker containers (https://docs.docker.com/engine/install/)")
	elif ! docker info >/dev/null 2>&1; then
		missing+=("docker: installed, but its daemon is not reachable; start it (systemctl start docker) or check your access to its socket")
	fi
	if ! command -v kind >/dev/null 2>&1; then
		missing+=("kind: not installed (go install sigs.k8s.io/kind@v0.33.0, or https://kind.sigs.k8s.io/docs/user/quick-start/#installation)")
	fi
	if ! command -v kubectl >/dev/null 2>&1; then
		missing+=("kubectl: not installed (https://kubernetes.io/docs/tasks/tools/)")
	fi
	if [ "$1" != down ] && [ ! -x "$SNORKEL" ]; then
		missing+=("$SNORKEL: not built; run make build")
	fi
	if [ "$1" != down ] && [ "$1" != check ] && command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1 &&
		! docker image inspect "$IMAGE" >/dev/null 2>&1; then
		missing+=("image $IMAGE: not built; run make image (or set IMAGE to one you have)")
	fi
	if [ ${#missing[@]} -gt 0 ]; then
		{
			say "The Kind lab cannot run here; it needs:"
			for m in "${missing[@]}"; do say "  $m"; done
			say "Without Docker, make lab runs the same demo in network namespaces."
		} >&2
		exit 1
	fi
}

kc() {
	local cluster=$1
	shift
	kubectl --kubeconfig "$KUBECONFIG_FILE" --context "kind-$cluster" "$@"
}

node_ip() { docker inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}' "$1"; }

create_cluster() {
	local name=$1
	if kind get clusters 2>/dev/null | grep -qx "$name"; then
		say "cluster $name exists; reusing it"
		kind export kubeconfig --name "$name" --kubeconfig "$KUBECONFIG_FILE" >/dev/null
		return
	fi
	local args=(create cluster --config "$here/$name.yaml" --kubeconfig "$KUBECONFIG_FILE")
	if [ -n "$KIND_NODE_IMAGE" ]; then
		args+=(--image "$KIND_NODE_IMAGE")
	fi
	kind "${args[@]}"
}

fill() { sed -e "s|@CLUSTER@|$2|g" -e "s|@IMAGE@|$IMAGE|g" -e "s|@CLIENT_IMAGE@|$CLIENT_IMAGE|g" "$here/$1"; }

up() {
	mkdir -p "$STATE"
	for c in "$BROKER" "${MEMBERS[@]}"; do
		create_cluster "$c"
	done
	for c in "${MEMBERS[@]}"; do
		kind load docker-image "$IMAGE" --name "$c"
	done
	# Members reach the broker's API server at its node's address on the
	# kind network, which its certificate covers.
	local broker_url
	broker_url=https://$(node_ip "$BROKER-control-plane"):6443
	"$SNORKEL" deploy-broker --kubeconfig "$KUBECONFIG_FILE" --context "kind-$BROKER" --broker-url "$broker_url" \
		--out "$STATE/broker-info.subm"
	"$SNORKEL" deploy-broker --kubeconfig "$KUBECONFIG_FILE" --context "kind-$BROKER" --broker-url "$broker_url" \
		--namespace submariner-k8s-broker-globalnet --globalnet --globalnet-cidr-range "$GLOBALNET_RANGE" \
		--out "$STATE/broker-info-globalnet.subm"
	for c in "${MEMBERS[@]}"; do
		local info=$STATE/broker-info.subm
		if [ "${BROKER_NS[$c]}" = submariner-k8s-broker-globalnet ]; then
			info=$STATE/broker-info-globalnet.subm
		fi
		"$SNORKEL" join "$info" --clusterid "$c" --kubeconfig "$KUBECONFIG_FILE" --context "kind-$c" \
			--clustercidr "${POD_CIDR[$c]}" --servicecidr "${SERVICE_CIDR[$c]}" \
			--cable-driver "$CABLE_DRIVER" --image "$IMAGE"
	done
	for c in "${MEMBERS[@]}"; do
		kc "$c" -n submariner-operator rollout status daemonset/snorkel-agent --timeout=300s
		kc "$c" -n submariner-operator rollout status daemonset/submariner-routeagent --timeout=300s
		kc "$c" -n submariner-operator rollout status deployment/submariner-lighthouse-coredns --timeout=300s
	done
	# The importing clusters have namespace sample first: services are
	# imported where their namespace exists.
	for c in c1 g1; do
		fill client.yaml "$c" | kc "$c" apply -f -
		kc "$c" -n sample wait pod/client --for=condition=Ready --timeout=300s
	done
	for c in c2 g2; do
		fill whereami.yaml "$c" | kc "$c" apply -f -
		kc "$c" -n sample rollout status deployment/whereami --timeout=300s
		kc "$c" -n sample rollout status statefulset/whereami --timeout=300s
		"$SNORKEL" export service whereami-cs -n sample --kubeconfig "$KUBECONFIG_FILE" --context "kind-$c"
		"$SNORKEL" export service whereami-ss -n sample --kubeconfig "$KUBECONFIG_FILE" --context "kind-$c"
	done
	say "lab up: kubectl --kubeconfig $KUBECONFIG_FILE --context kind-c1 (or kind-c2, kind-g1, kind-g2, kind-broker)"
}

failed=0

# check runs the command until its output matches the pattern, or the
# deadline passes; it prints one line either way.
check() {
	local what=$1 pattern=$2 out=""
	shift 2
	local end=$((SECONDS + CHECK_DEADLINE))
	while :; do
		if out=$("$@" 2>&1) && grep -Eq -- "$pattern" <<<"$out"; then
			say "✓ $what"
			return
		fi
		if [ $SECONDS -ge $end ]; then
			say "✗ $what: got $(head -c 300 <<<"$out" | tr '\n' ' ')"
			failed=1
			return
		fi
		sleep 3
	done
}

# client runs a command in the client pod of a cluster.
client() {
	local cluster=$1
	shift
	kc "$cluster" -n sample exec client -- "$@"
}

demo() {
	local cs_ip pod pod_ip client_ip g2_global a b
	cs_ip=$(kc c2 -n sample get service whereami-cs -o jsonpath='{.spec.clusterIP}')
	pod=$(kc c2 -n sample get pods -l app=whereami -o jsonpath='{.items[0].metadata.name}')
	pod_ip=$(kc c2 -n sample get pod "$pod" -o jsonpath='{.status.podIP}')
	client_ip=$(kc c1 -n sample get pod client -o jsonpath='{.status.podIP}')
	say "c1 → c2 (no Globalnet; cable driver $CABLE_DRIVER)"
	check "dns   whereami-cs.sample.svc.clusterset.local is c2's ClusterIP $cs_ip" "^${cs_ip//./\\.}\$" \
		client c1 dig +short whereami-cs.sample.svc.clusterset.local
	check "http  whereami-cs.sample.svc.clusterset.local answers from c2" '"cluster":"c2"' \
		client c1 curl -sS --max-time 5 http://whereami-cs.sample.svc.clusterset.local/
	check "http  c2.whereami-cs.sample.svc.clusterset.local answers from c2" '"cluster":"c2"' \
		client c1 curl -sS --max-time 5 http://c2.whereami-cs.sample.svc.clusterset.local/
	check "dns   whereami-ss.sample.svc.clusterset.local lists c2's pods" '^10\.9\.' \
		client c1 dig +short whereami-ss.sample.svc.clusterset.local
	check "http  whereami-0.c2.whereami-ss.sample.svc.clusterset.local is pod whereami-0" '"pod":"whereami-0"' \
		client c1 curl -sS --max-time 5 http://whereami-0.c2.whereami-ss.sample.svc.clusterset.local:8080/
	check "ping  c1 client → c2 pod $pod_ip" ' 0% packet loss' \
		client c1 ping -c 3 -W 2 "$pod_ip"
	check "http  c1 client → c2 pod $pod_ip sees the client's own address $client_ip" "\"client\":\"${client_ip//./\\.}:" \
		client c1 curl -sS --max-time 5 "http://$pod_ip:8080/"
	say "g1 → g2 (Globalnet: the same CIDRs on both sides)"
	g2_global=$(kubectl --kubeconfig "$KUBECONFIG_FILE" --context "kind-$BROKER" -n submariner-k8s-broker-globalnet \
		get clusters.submariner.io g2 -o jsonpath='{.spec.global_cidr[0]}')
	IFS=. read -r a b _ <<<"$g2_global"
	check "dns   whereami-cs.sample.svc.clusterset.local is a global IP of g2 ($g2_global)" "^$a\\.$b\\." \
		client g1 dig +short whereami-cs.sample.svc.clusterset.local
	check "http  whereami-cs.sample.svc.clusterset.local answers from g2" '"cluster":"g2"' \
		client g1 curl -sS --max-time 5 http://whereami-cs.sample.svc.clusterset.local/
	if [ "$failed" -ne 0 ]; then
		die "some checks failed; the clusters are still up (deploy/kind/lab.sh down removes them)"
	fi
	say "all checks passed; deploy/kind/lab.sh down (make kind-lab-down) removes the clusters"
}

down() {
	for c in "$BROKER" "${MEMBERS[@]}"; do
		kind delete cluster --name "$c" --kubeconfig "$KUBECONFIG_FILE"
	done
	rm -rf "$STATE"
}

main() {
	local cmd=${1:-run}
	case $cmd in
	run | up | demo | down | check) ;;
	*)
		say "usage: $0 [run|up|demo|down|check]" >&2
		exit 2
		;;
	esac
	check_tools "$cmd"
	case $cmd in
	run)
		up
		demo
		;;
	up) up ;;
	demo) demo ;;
	down) down ;;
	check) say "the Kind lab has what it needs" ;;
	esac
}

main "$@"
