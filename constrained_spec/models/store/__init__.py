"""The offline model store: which files the short names pin (``sources``), fetching and joining them
(``fetch``), checks against damage and a full disk (``integrity``), the cache folder, its locks and
atomic writes (``cache``), and tokenizers (``tokenizer_assets``, ``shared_tokenizers``). It imports no
runtime: the runtimes (``models.torch``, ``models.llamacpp``) build their forms of the weights from it.
"""
