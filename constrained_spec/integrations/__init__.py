"""Doors where users already are: :mod:`constrained_spec.integrations.transformers` (a
``LogitsProcessor`` for ``model.generate`` and a drop-in for transformers' assisted generation).

Each door uses the public API (compiled constraints, ``Generator``) and nothing of the engine's
internals."""
