"""hami-tune's commands, one module each, named after the subcommand: ``recommend`` is hami-tune
without one. Each adds its parser with ``add_parser`` and runs from it with ``run`` (hami.tune.main)."""
