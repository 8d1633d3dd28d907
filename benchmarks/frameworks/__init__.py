"""One module per framework for ``framework_suite.py``: what to archive from
its repository, what to stand in for, and its configurations."""
