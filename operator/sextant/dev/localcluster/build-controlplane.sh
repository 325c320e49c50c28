#!/usr/bin/env bash
# Builds the test control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok, kwokctl)
# from the Go module proxy into a cache keyed by version. A second run finds the cache and builds nothing.
# Prints the bin directory on stdout as its last line. With --check it builds nothing: exit 0 (and the directory)
# when the cache holds every binary, 3 when a run would build.
set -euo pipefail

K8S_VERSION=${K8S_VERSION:-v1.36.3}
ETCD_VERSION=${ETCD_VERSION:-v3.6.16}
KWOK_VERSION=${KWOK_VERSION:-v0.8.0}
CACHE_ROOT=${SEXTANT_CACHE:-$HOME/.cache/sextant}
# "-resume": kwok's pod watch resumes where it ended (below); a different binary, so a different cache
BIN="$CACHE_ROOT/controlplane-k8s-$K8S_VERSION-etcd-$ETCD_VERSION-kwok-$KWOK_VERSION-resume/bin"
NEEDED=(etcd kube-apiserver kube-controller-manager kube-scheduler kwok kwokctl)

die() { echo "build-controlplane: $*" >&2; exit 1; }
have_all() { for b in "${NEEDED[@]}"; do [ -x "$BIN/$b" ] || return 1; done; }

if have_all; then echo "$BIN"; exit 0; fi
[ "${1:-}" = --check ] && exit 3

command -v go >/dev/null || die "Go is not installed (need Go >= 1.26 to build the control plane; or set SEXTANT_TEST_BINDIR / SEXTANT_TEST_KUBECONFIG)"
export GOTOOLCHAIN=local CGO_ENABLED=0 GOFLAGS=-mod=mod
go env GOPROXY >/dev/null
mkdir -p "$BIN"
WORK=$(mktemp -d "$CACHE_ROOT/build.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
probe=$(go list -m -json "k8s.io/kubernetes@$K8S_VERSION" 2>&1) || die "the Go module proxy is not reachable ($(echo "$probe" | tail -n1))"

log() { echo "build-controlplane: $*" >&2; }
start=$(date +%s)

if [ ! -x "$BIN/kwok" ] || [ ! -x "$BIN/kwokctl" ]; then
  log "kwok $KWOK_VERSION"
  GOBIN="$BIN" go install "sigs.k8s.io/kwok/cmd/kwokctl@$KWOK_VERSION" >&2
  # kwok's own informer sets resourceVersion "0" on every watch it opens, re-watches included, so each time the
  # API server ends its pod watch (it ends a consumer that falls behind, as kwok's one matching goroutine does in a
  # burst) every pod on its nodes comes again as ADDED and is matched and played again. A kubelet resumes its watch
  # from the last resourceVersion it saw; this build does the same, and keeps "0" for the first list and a relist.
  src=$(go mod download -json "sigs.k8s.io/kwok@$KWOK_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
  [ -d "$src" ] || die "could not download sigs.k8s.io/kwok@$KWOK_VERSION's source"
  cp -R "$src" "$WORK/kwok" && chmod -R u+w "$WORK/kwok" && cd "$WORK/kwok"
  informer=pkg/utils/informer/event.go
  line='if !o.EnableListPager || o.EnableStreamWatch {'
  [ "$(grep -cF "$line" "$informer")" = 1 ] || die "kwok $KWOK_VERSION: $informer changed shape; review the resume-watch edit"
  sed -i "s/^\([[:space:]]*\)if !o.EnableListPager || o.EnableStreamWatch {$/\1if (!o.EnableListPager || o.EnableStreamWatch) \&\& opts.ResourceVersion == \"\" {/" "$informer"
  grep -qF '&& opts.ResourceVersion == "" {' "$informer" || die "kwok $KWOK_VERSION: the resume-watch edit did not apply"
  go build -trimpath -ldflags "-s -w" -o "$BIN/kwok" ./cmd/kwok >&2
fi

if [ ! -x "$BIN/etcd" ]; then
  log "etcd $ETCD_VERSION"
  mkdir -p "$WORK/etcd" && cd "$WORK/etcd"
  go mod init local/etcdbin >/dev/null 2>&1
  go get -tool "go.etcd.io/etcd/server/v3@$ETCD_VERSION" >&2
  go build -trimpath -ldflags "-s -w" -o "$BIN/etcd" go.etcd.io/etcd/server/v3 >&2
fi

if [ ! -x "$BIN/kube-apiserver" ] || [ ! -x "$BIN/kube-controller-manager" ] || [ ! -x "$BIN/kube-scheduler" ]; then
  log "kubernetes $K8S_VERSION"
  mkdir -p "$WORK/kube" && cd "$WORK/kube"
  go mod init local/kubebins >/dev/null 2>&1
  go mod edit -go=1.26.0
  gomod=$(go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  [ -f "$gomod" ] || die "could not read k8s.io/kubernetes@$K8S_VERSION's go.mod"
  staging=${K8S_VERSION/v1./v0.}
  for mod in $(sed -n 's#^[[:space:]]*\(k8s.io/[^ ]*\) => ./staging/src/.*#\1#p' "$gomod"); do
    go mod edit "-replace=$mod=$mod@$staging"
  done
  cmds=(kube-apiserver kube-controller-manager kube-scheduler)
  go get -tool $(for c in "${cmds[@]}"; do echo "k8s.io/kubernetes/cmd/$c@$K8S_VERSION"; done) >&2
  minor=$(echo "$K8S_VERSION" | cut -d. -f2)
  now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  ld="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld="$ld -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean -X $pkg.buildDate=$now"
  done
  for c in "${cmds[@]}"; do
    log "  $c"
    go build -trimpath -ldflags "$ld" -o "$BIN/$c" "k8s.io/kubernetes/cmd/$c" >&2
  done
fi

have_all || die "build finished but binaries are missing in $BIN"
log "built in $(( $(date +%s) - start )) s"
echo "$BIN"
