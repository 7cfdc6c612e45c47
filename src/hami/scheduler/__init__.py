"""Scheduler extender: filter, bind, webhook."""
