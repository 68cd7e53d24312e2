"""Models: the protocol the loop uses (``protocol``), transformers models (``hf``), packed CPU
linears (``packed_linear``), the offline store and dtypes (``store``, ``sources``), tokenizer assets.

Importing this package loads nothing heavy (the command line reads ``store``'s choices before torch).
"""
