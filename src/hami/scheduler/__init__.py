"""The ``hami-scheduler`` daemon, kube-scheduler's extender and HAMi's admission webhook: ``engine``
(pure scheduling logic) and ``extender`` (the daemon around it)."""
