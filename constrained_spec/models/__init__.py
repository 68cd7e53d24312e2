"""Models: the protocol the loop uses (``protocol``), transformers models (``hf``), packed CPU
linears (``packed_linear``), dtypes (``dtypes``), the offline store (``store``: loading by name, folder,
``.gguf`` or hub id; ``sources``, ``fetch``, ``convert``, ``packed_cache``, ``cache``), tokenizer assets.

Importing this package loads nothing heavy (the command line reads ``dtypes``' choices before torch).
"""
