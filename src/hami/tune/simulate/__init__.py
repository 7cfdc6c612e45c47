"""``hami-tune simulate``: replay a scheduling snapshot under the current and other configurations.

``scenario`` (what ``--set`` changes), ``cluster`` (a snapshot as the engine's inputs), ``records``
(what a replay records), ``engine_state``, ``order_search``, ``sampling`` and ``replay`` (the event
loop around the engine), ``measures`` (the figures and the fidelity check), ``table``,
``page`` and ``cli`` (the outputs and the command), ``verify`` (``hami-tune --verify``).
"""
