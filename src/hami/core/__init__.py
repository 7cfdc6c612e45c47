"""Shared core: device model, wire codecs, Kubernetes access, NVML, logging, serving, profiling."""
