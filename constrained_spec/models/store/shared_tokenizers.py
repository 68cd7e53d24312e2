"""Tokenizers loaded from saved folders, one object per content.

The default pair's target and draft carry the same tokenizer files; loading them once saves a
second parse of an 11 MB ``tokenizer.json`` and lets the vocabulary check see one tokenizer
(``grammar.vocab.check_same_vocabulary`` skips what is the same object). Keyed by the sha256 of the
files, held weakly: a tokenizer goes when the last model holding it goes.
"""

from __future__ import annotations

import hashlib
import threading
import weakref
from pathlib import Path
from typing import Any

__all__ = ["TOKENIZER_FILES", "shared_tokenizer", "tokenizer_files_key"]

#: the files of a saved tokenizer folder that decide what it is
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja", "special_tokens_map.json",
                   "added_tokens.json", "vocab.json", "merges.txt", "tokenizer.model")

_TOKENIZERS: weakref.WeakValueDictionary[str, Any] = weakref.WeakValueDictionary()
_LOCK = threading.Lock()


def tokenizer_files_key(folder: Path) -> str:
    """The sha256 of a folder's tokenizer files (names and bytes; a missing file counts as missing)."""
    h = hashlib.sha256()
    for name in TOKENIZER_FILES:
        p = folder / name
        h.update(name.encode() + b"\0" + (p.read_bytes() if p.is_file() else b"-") + b"\0")
    return h.hexdigest()


def shared_tokenizer(folder: Path) -> Any:
    """The transformers tokenizer saved in ``folder``: the object already loaded from the same bytes
    while something holds it, else a fresh load (offline)."""
    from transformers import AutoTokenizer

    key = tokenizer_files_key(folder)
    with _LOCK:
        tokenizer = _TOKENIZERS.get(key)
        if tokenizer is None:
            tokenizer = AutoTokenizer.from_pretrained(folder, local_files_only=True)
            _TOKENIZERS[key] = tokenizer
    return tokenizer
