"""The ``hami-doctor`` tool (also ``kubectl hami``): the debugging decision trees of the HAMi guides as
one command.

``hami-doctor pod NS/NAME`` walks the pod-pending decision trees of
docs/guides/scheduler-debugging.md and docs/guides/device-plugin-debugging.md (§6) and stops at the
diagnosis; ``hami-doctor nodes`` / ``node NAME`` is the batch annotation check of the scheduler guide
plus the register checks of the device-plugin guide (§4.2); ``hami-doctor logs [FILE|DIR|-]`` maps
known log lines (both guides' tables, HAMi's own lines and this project's) to their meaning and action.

Checks are pure functions over objects fetched once (GET/LIST only); ``--fix`` is the only path that
writes, and it asks first. Exit status: 0 healthy (info findings included), 1 warning, 2 broken,
3 usage error (bad arguments, unknown pod or node, unreadable log), 4 the cluster could not be
reached or read.
"""
