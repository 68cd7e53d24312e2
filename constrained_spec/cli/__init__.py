"""The ``constrained-spec`` command line: argument parsing and checks before anything loads, one-line
errors, progress. ``main`` is the entry point; importing this package loads neither torch nor
transformers."""

from constrained_spec.cli.commands import main

__all__ = ["main"]
