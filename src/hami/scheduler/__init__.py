"""The scheduler: ``engine`` (pure scheduling logic) and ``extender`` (the daemon around it)."""
