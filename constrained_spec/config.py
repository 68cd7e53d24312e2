"""Defaults the API, the server and the command line share; importable without torch or transformers."""

from __future__ import annotations

from constrained_spec.models.sources import DEFAULT_DRAFT, DEFAULT_TARGET

#: the proposal sources a Generator can use: the draft model, strings the grammar forces, prompt lookup
PROPOSERS = ("draft", "grammar", "lookup")
#: the default draft length: the best fixed k with every proposer on the 8-prompt bench
#: (results/bench-s4-sweep: k2..k6 gave 1.57 / 1.90 / 1.92 / 2.13 / 1.67x target-only)
NUM_DRAFT_TOKENS = 5

__all__ = ["DEFAULT_DRAFT", "DEFAULT_TARGET", "NUM_DRAFT_TOKENS", "PROPOSERS"]
