"""Models: the runtime protocol the engine sees (``protocol``) and the costs it measures (``cost_cache``);
each runtime in a room of its own behind it: ``torch/`` (transformers: the sequence ``hf``, its rows
``batched`` over a ragged cache, packed CPU linears, dtypes and devices, prefill twins, and the torch forms
of stored weights: ``convert``, ``packed_cache``, ``resolve``) and ``llamacpp/`` (a GGUF as stored, through
llama.cpp); the runtime choice (``runtime``) and loading through the chosen runtime (``loading``); and
apart, the offline store (``store/``: sources, fetch, integrity, the cache folder, tokenizers), which imports
no runtime. Runtimes import the store and the protocol, never each other.

Importing this package loads nothing heavy (the command line reads ``torch.dtypes``' choices before torch).
"""
