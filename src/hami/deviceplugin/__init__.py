"""The ``hami-device-plugin`` daemon: the kubelet device plugin (v1beta1) that registers and allocates
HAMi's vGPUs."""
