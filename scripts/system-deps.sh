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
# kubectl: where none is installed, Debian's kubernetes-client (1.20 on Debian 12: enough for tests/deploy
# kustomize checks; tests/deploy/test_recipes.py needs 1.27+, which validates through OpenAPI v3).
command -v kubectl >/dev/null 2>&1 || need+=(kubernetes-client)
# A real kubelet's container runtime (tests/integration/test_real_kubelet.py): containerd, runc, the
# loopback CNI plugin, and busybox-static for the local image (docs/design/real-kubelet.md).
command -v containerd >/dev/null 2>&1 || need+=(containerd)
command -v runc >/dev/null 2>&1 || need+=(runc)
[ -x /usr/lib/cni/loopback ] || need+=(containernetworking-plugins)
[ -x /bin/busybox ] || need+=(busybox-static)
[ ${#need[@]} -eq 0 ] && exit 0
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
