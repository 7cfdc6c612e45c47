"""Kubelet device plugin (v1beta1)."""
