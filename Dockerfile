# The image deploy/ runs (ghcr.io/hami-py/hami): this package with its console scripts on PATH:
# hami-monitor, hami-scheduler, hami-device-plugin, hami-doctor, hami-tune.
#
#   docker build -t ghcr.io/hami-py/hami:0.1.0 .
#
# NVML (libnvidia-ml.so.1) is not in the image: the NVIDIA container toolkit mounts the host
# driver's copy into the node-agent pods (deploy/daemonset.yaml sets NVIDIA_VISIBLE_DEVICES=all).
ARG PYTHON_IMAGE=python:3.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS wheels
WORKDIR /build
COPY pyproject.toml README.md ./
COPY src/ src/
RUN pip wheel --no-cache-dir --wheel-dir /wheels .

FROM ${PYTHON_IMAGE}
COPY --from=wheels /wheels /wheels
RUN pip install --no-cache-dir --no-index --find-links=/wheels hami && rm -rf /wheels
# The scheduler runs as 65532 on a read-only root filesystem (deploy/scheduler.yaml): no .pyc
# writes; logs go to stderr unbuffered so `kubectl logs` shows klog lines as they happen.
ENV PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
# Non-root unless a manifest says otherwise: the node agents run as root on purpose, for the host
# paths they write (deploy/daemonset.yaml says which).
USER 65532:65532
CMD ["hami-monitor"]
