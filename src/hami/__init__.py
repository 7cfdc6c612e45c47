"""hami: HAMi's GPU-sharing control plane for Kubernetes, built around observability."""

__version__ = "0.1.0"
