"""hami-doctor: the debugging decision trees of the HAMi guides as one command.

``hami-doctor pod NS/NAME`` walks the pod-pending tree (docs/guides/scheduler-debugging.md §7,
docs/guides/device-plugin-debugging.md §6) and stops at the diagnosis; ``hami-doctor nodes`` / ``node NAME``
is the batch annotation check of docs/guides/scheduler-debugging.md §5 plus the register checks of
docs/guides/device-plugin-debugging.md §4.2; ``hami-doctor logs [FILE|-]`` maps known log lines
(docs/guides/device-plugin-debugging.md §1.3 and §7, the filter lines of
docs/guides/scheduler-debugging.md §3.2) to their meaning and action.

Checks are pure functions over objects fetched once (GET/LIST only); ``--fix`` is the only path that
writes, and it asks first. Exit status: 0 healthy, 1 warning, 2 broken, 3 usage error (bad
arguments, unknown pod or node, unreadable log), 4 the cluster could not be reached or read.
"""
