"""What tests and benchmarks share (tests import it, never each other): the Kubernetes API emulator,
the real control plane, the region writer, the simulated node and cluster, object builders, waits,
the daemons under test and HAMi's peer. Components never import it; ``hami.demo`` may, never the
reverse. It is not in the wheel or the image (docs/design/packaging.md)."""
