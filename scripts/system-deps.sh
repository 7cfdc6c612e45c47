#!/usr/bin/env bash
# Installs the Debian tools the tests drive for real (Prometheus, promtool, Alertmanager, Go's pprof,
# kubectl and jq for the guides' recipes). Go also builds the real control plane
# (hami.testing.controlplane): that needs Go 1.26, or Go 1.21+ which fetches 1.26 from the module
# proxy; `make control-plane-bin` says which is missing.
# Idempotent: does nothing when they are already present.
set -euo pipefail
need=()
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v prometheus >/dev/null 2>&1 || need+=(prometheus)
command -v prometheus-alertmanager >/dev/null 2>&1 || need+=(prometheus-alertmanager)
command -v go >/dev/null 2>&1 || need+=(golang-go)
command -v jq >/dev/null 2>&1 || need+=(jq)
command -v curl >/dev/null 2>&1 || need+=(curl)
# kubectl: where none is installed, Debian's kubernetes-client (1.20 on Debian 12: enough for the
# emulator's kubectl tests; the recipe test runs the kubectl built with the control plane).
command -v kubectl >/dev/null 2>&1 || need+=(kubernetes-client)
# A real kubelet's container runtime (tests/integration/test_real_kubelet.py): containerd, runc, the
# loopback CNI plugin, and busybox-static for the local image (docs/design/real-kubelet.md).
command -v containerd >/dev/null 2>&1 || need+=(containerd)
command -v runc >/dev/null 2>&1 || need+=(runc)
[ -x /usr/lib/cni/loopback ] || need+=(containernetworking-plugins)
[ -x /bin/busybox ] || need+=(busybox-static)

# Go 1.21+ for the control plane's build (1.21-1.25 fetch 1.26 themselves). Debian 12's golang-go is
# 1.19: where no Go 1.21+ is on PATH or in /usr/local/go, Go's own toolchain module is unpacked into
# /usr/local/go from the Go module proxy (hami.testing.controlplane.build looks there too).
GO_TOOLCHAIN=go1.26.8
go_ok() {
  local g
  for g in "$(command -v go || true)" /usr/local/go/bin/go; do
    [ -n "$g" ] && [ -x "$g" ] && GOTOOLCHAIN=local "$g" env GOVERSION 2>/dev/null \
      | grep -qE '^go1\.(2[1-9]|[3-9][0-9])' && return 0
  done
  return 1
}
fetch_go() {
  go_ok && return 0
  if [ "$(id -u)" -ne 0 ] || [ -e /usr/local/go ]; then
    echo "no Go 1.21+ for the control plane build: install Go ${GO_TOOLCHAIN#go} from https://go.dev/dl" >&2
    return 0  # `make control-plane-bin` says it again, and fails in CI
  fi
  # Debian's Go (1.19) downloads Go's own toolchain module through the configured module proxy,
  # the same module a Go 1.21+ fetches for GOTOOLCHAIN; its directory is a complete GOROOT.
  local arch tmp dir
  arch=$(dpkg --print-architecture)
  tmp=$(mktemp -d)
  dir=$(cd "$tmp" && GOMODCACHE="$tmp/mod" GOFLAGS=-modcacherw GOTOOLCHAIN=local \
    "$(command -v go)" mod download -json "golang.org/toolchain@v0.0.1-${GO_TOOLCHAIN}.linux-${arch}" \
    | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
  cp -r "$dir" /usr/local/go
  chmod -R u+w,a+x /usr/local/go/bin /usr/local/go/pkg/tool  # the module cache keeps no modes
  rm -rf "$tmp"
}

if [ ${#need[@]} -eq 0 ]; then
  fetch_go
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "missing Debian packages: ${need[*]} (run as root, or: sudo apt-get install ${need[*]})" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# The Debian packages start their services; the tests run their own instances on free ports.
apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
for svc in prometheus prometheus-alertmanager prometheus-node-exporter containerd; do
  (systemctl stop "$svc" || service "$svc" stop) >/dev/null 2>&1 || true
done
fetch_go
