"""``make demo``: the whole product on one machine, on a simulated GPU cluster: the stack of
processes (``stack``), the simulated GPU host (``simhost``, ``simdriver``), the stand-ins for
kube-scheduler, kube-state-metrics and Alertmanager's receiver, and the monitoring configuration.
It uses the test support (``hami.testing``: the API emulator, the real control plane, the simulated
cluster's objects), never the reverse. It is run from a checkout and is not in the wheel or the image
(docs/design/packaging.md)."""
