"""Where constrained-spec keeps its caches (models, tokenizers, compiled automata)."""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "CONSTRAINED_SPEC_CACHE"


def cache_root(override: str | os.PathLike[str] | None = None) -> Path:
    """The cache root: ``override``, else $CONSTRAINED_SPEC_CACHE, else the platform user cache dir."""
    if override:
        root = Path(override)
    elif os.environ.get(CACHE_ENV):
        root = Path(os.environ[CACHE_ENV])
    else:
        import platformdirs

        root = Path(platformdirs.user_cache_dir("constrained-spec"))
    root.mkdir(parents=True, exist_ok=True)
    return root
