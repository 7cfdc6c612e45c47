"""The ``hami-monitor`` daemon (HAMi's vGPU monitor): HAMi-core shared regions and NVML into Prometheus."""
