"""The torch/transformers runtime: a transformers causal LM as a sequence (``hf``) and as rows
(``batched``, over ``ragged_cache`` with ``ragged_attention``), fbgemm-packed linears (``packed_linear``),
its dtypes and devices, prefill twins, and the forms of stored weights it loads (``convert``:
safetensors from a GGUF; ``packed_cache``: packed linears on disk; ``resolve``: a spec to a loaded model).

Importing this package loads nothing (the name shadows no library: inside it ``import torch`` is torch).
"""
