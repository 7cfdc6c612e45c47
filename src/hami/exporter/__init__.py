"""vGPU monitor: HAMi-core shared regions and NVML into Prometheus."""
