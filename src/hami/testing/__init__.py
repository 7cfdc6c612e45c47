"""Test, benchmark and demo support, in one place (tests import it, never each other): the
Kubernetes API emulator, the region writer, the simulated node and demo stack, object builders,
waits, the daemons under test and HAMi's own test vectors. Components never import it."""
