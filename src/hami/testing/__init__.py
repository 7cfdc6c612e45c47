"""Test and demo support: Kubernetes API emulator, region writer, simulated node."""
