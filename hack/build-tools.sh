#!/usr/bin/env bash
# Builds the chart tools of the tests (helm v3 and kube-score) from the Go module proxy into a cache keyed by
# their versions, like hack/build-controlplane.sh. A second run finds the cache and builds nothing.
# Prints the bin directory on stdout as its last line; progress and errors go to stderr, one line each.
set -euo pipefail

HELM_VERSION=${HELM_VERSION:-v3.22.0}
KUBE_SCORE_VERSION=${KUBE_SCORE_VERSION:-v1.20.0}
CACHE_ROOT=${SEXTANT_CACHE:-$HOME/.cache/sextant}
BIN="$CACHE_ROOT/tools-helm-$HELM_VERSION-kube-score-$KUBE_SCORE_VERSION/bin"

die() { echo "build-tools: $*" >&2; exit 1; }
# The reason in `go mod download -json` output (its "Error" field), else its last line.
why() { local e; e=$(echo "$1" | sed -n 's/^[[:space:]]*"Error": "\(.*\)",\{0,1\}$/\1/p' | tail -n1); echo "${e:-$(echo "$1" | tail -n1)}"; }
log() { echo "build-tools: $*" >&2; }

if [ -x "$BIN/helm" ] && [ -x "$BIN/kube-score" ]; then echo "$BIN"; exit 0; fi

command -v go >/dev/null || die "Go is not installed (need Go >= 1.26 to build helm and kube-score; or set SEXTANT_TEST_TOOLSDIR to a folder holding both)"
export GOTOOLCHAIN=local CGO_ENABLED=0
mkdir -p "$BIN" "$CACHE_ROOT"
WORK=$(mktemp -d "$CACHE_ROOT/build-tools.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
start=$(date +%s)

# Each binary is built into $WORK and moved into place whole, so that an interrupted build (or two builds at
# once) never leaves a half-written binary in the cache.

if [ ! -x "$BIN/helm" ]; then
  probe=$(go mod download -json "helm.sh/helm/v3@$HELM_VERSION" 2>&1) \
    || die "the Go module proxy is not reachable or has no helm.sh/helm/v3@$HELM_VERSION ($(why "$probe"))"
  gomod=$(echo "$probe" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')
  [ -f "$gomod" ] || die "could not read helm.sh/helm/v3@$HELM_VERSION's go.mod"
  # Like helm's own Makefile: the version it reports, and the Kubernetes version `helm template` and `helm lint`
  # assume without a cluster (.Capabilities.KubeVersion; unstamped it is v1.20), from its client-go (v0.N → 1.N).
  client_go_minor=$(sed -n 's#^[[:space:]]*k8s.io/client-go v0\.\([0-9]*\)\..*#\1#p' "$gomod" | head -n1)
  [ -n "$client_go_minor" ] || die "could not find k8s.io/client-go in helm $HELM_VERSION's go.mod"
  ld="-s -w -X helm.sh/helm/v3/internal/version.version=$HELM_VERSION -X helm.sh/helm/v3/internal/version.gitTreeState=clean"
  for pkg in helm.sh/helm/v3/pkg/lint/rules helm.sh/helm/v3/pkg/chartutil; do
    ld="$ld -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$client_go_minor"
  done
  log "helm $HELM_VERSION"
  GOBIN="$WORK" go install -trimpath -ldflags "$ld" "helm.sh/helm/v3/cmd/helm@$HELM_VERSION" >&2 \
    || die "go install helm.sh/helm/v3/cmd/helm@$HELM_VERSION failed"
  mv -f "$WORK/helm" "$BIN/helm"
fi

if [ ! -x "$BIN/kube-score" ]; then
  probe=$(go mod download -json "github.com/zegl/kube-score@$KUBE_SCORE_VERSION" 2>&1) \
    || die "the Go module proxy is not reachable or has no github.com/zegl/kube-score@$KUBE_SCORE_VERSION ($(why "$probe"))"
  log "kube-score $KUBE_SCORE_VERSION"
  now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
  GOBIN="$WORK" go install -trimpath -ldflags "-s -w -X main.version=$KUBE_SCORE_VERSION -X main.date=$now" \
    "github.com/zegl/kube-score/cmd/kube-score@$KUBE_SCORE_VERSION" >&2 \
    || die "go install github.com/zegl/kube-score/cmd/kube-score@$KUBE_SCORE_VERSION failed"
  mv -f "$WORK/kube-score" "$BIN/kube-score"
fi

[ -x "$BIN/helm" ] && [ -x "$BIN/kube-score" ] || die "build finished but binaries are missing in $BIN"
log "built in $(( $(date +%s) - start )) s"
echo "$BIN"
