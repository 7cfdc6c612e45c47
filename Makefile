# The two commands the README gives: `make demo` and `make test`.
VENV ?= .venv
PY := $(VENV)/bin/python
export PYTHONPATH := $(CURDIR)/src:$(CURDIR)

.PHONY: test demo lint typecheck imports unit venv sysdeps proto generate clean control-plane control-plane-bin

$(VENV)/.installed: pyproject.toml
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $@

venv: $(VENV)/.installed

sysdeps:
	bash scripts/system-deps.sh

lint: venv
	$(VENV)/bin/ruff check src tests bench alerts dashboards scripts

typecheck: venv
	$(VENV)/bin/mypy
	$(VENV)/bin/mypy --strict --explicit-package-bases alerts dashboards scripts

imports: venv
	$(VENV)/bin/lint-imports

# The real Kubernetes control plane (etcd, kube-apiserver, kube-scheduler, kubectl) the integration
# tests run on: built once from the Go module proxy into ~/.cache/hami/controlplane (progress shown).
# Where it cannot be built, the tests that need it skip saying why; in CI (CI=true) that is a failure.
control-plane-bin: venv
	$(PY) -m hami.testing.controlplane --build-only || [ "$$CI" != true ]
	$(PY) -m hami.testing.controlplane.kubelet || [ "$$CI" != true ]

# Builds it if needed, starts it on loopback, prints the kubeconfig; Ctrl-C stops it.
control-plane: venv
	$(PY) -m hami.testing.controlplane

unit: venv sysdeps control-plane-bin
	$(PY) -m pytest -q $(PYTEST_ARGS)

test: lint typecheck imports unit

proto: venv
	$(PY) scripts/gen_proto.py

generate: venv
	$(PY) -m alerts.generate
	$(PY) scripts/gen_deploy.py
	$(PY) -m dashboards.generate
	$(PY) scripts/gen_metrics_doc.py
	$(PY) scripts/gen_provisioning.py
	$(PY) scripts/gen_mixin.py

# HAMI_CONTROL_PLANE=real: on the real control plane (built first if needed) instead of the emulator.
HAMI_CONTROL_PLANE ?= emulator
demo: venv sysdeps
	$(PY) -m hami.demo --control-plane $(HAMI_CONTROL_PLANE)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache .demo .controlplane
