"""hami-doctor: the debugging decision trees as one command."""
