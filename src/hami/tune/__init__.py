"""hami-tune: tuning recommendations from Prometheus."""
