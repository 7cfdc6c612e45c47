"""The ``hami-scheduler`` daemon around the engine: flags, HTTP routes, filter service (live and dry
run), bind, node lock, register loop, leadership, events, informer state and metrics."""
