"""hami-doctor's commands, one module each, named after the subcommand. Each adds its parser with
``add_parser`` and runs from it with ``run`` (hami.doctor.main); what they share is hami.doctor.cli."""
