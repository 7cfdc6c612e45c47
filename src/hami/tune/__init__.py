"""The ``hami-tune`` tool: tuning recommendations from Prometheus, the chargeback report, drain plans
(defrag) and the snapshot simulator."""
