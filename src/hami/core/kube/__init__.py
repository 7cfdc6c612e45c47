"""Kubernetes API access on the official ``kubernetes`` client.

``options`` (flags), ``ratelimit`` (client-go's token bucket), ``metrics`` (client-go metric names),
``client`` (the limited, instrumented ``ApiClient``), ``raw`` (JSON requests that keep objects as
dicts), ``informer`` (list+watch cache), ``patches`` and ``events``.
"""
