"""Kubelet device-plugin API v1beta1: the proto and its checked-in generated stubs."""
