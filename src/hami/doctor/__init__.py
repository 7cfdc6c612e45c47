"""hami-doctor: the debugging decision trees of the HAMi guides as one command.

``hami-doctor pod NS/NAME`` walks the pod-pending tree (seed 000 调试决策树, seed 001 §6) and stops
at the diagnosis; ``hami-doctor nodes`` / ``node NAME`` is seed 000's batch annotation check plus the
register checks of seed 001 §4.2; ``hami-doctor logs [FILE|-]`` maps known log lines (seed 001 §1.3
and §7, seed 000's filter lines) to their meaning and action.

Checks are pure functions over objects fetched once (GET/LIST only); ``--fix`` is the only path that
writes, and it asks first. Exit status: 0 healthy, 1 warning, 2 broken, 3 usage error (bad
arguments, unknown pod or node, unreadable log), 4 the cluster could not be reached or read.
"""
