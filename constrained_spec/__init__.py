"""constrained-spec: exact grammar-constrained speculative decoding.

Outputs follow a JSON Schema, a Pydantic model or a regex; a draft model proposes tokens and the
target verifies them, with the grammar mask applied to both before acceptance.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from constrained_spec.errors import (
    CompileLimitError,
    ConstrainedSpecError,
    EmptyLanguageError,
    GrammarError,
    ModelLoadError,
    OutputValidationError,
    SchemaError,
    TokenBudgetExceeded,
    UnsupportedKeywordError,
    VocabularyMismatchError,
)
from constrained_spec.grammar import CFG, Regex

if TYPE_CHECKING:
    from constrained_spec.api import GenerationResult, Generator, generate, generate_json
    from constrained_spec.sampling.distribution import SamplingPolicy

#: names imported on first use: they pull in torch and transformers, which the command line's
#: argument checks and ``--help`` do not need
_LAZY = {"Generator": "api", "GenerationResult": "api", "generate": "api", "generate_json": "api",
         "SamplingPolicy": "sampling"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


__version__ = "0.1.0"

__all__ = [
    "CFG", "Generator", "GenerationResult", "generate", "generate_json", "Regex", "SamplingPolicy",
    "ConstrainedSpecError", "SchemaError", "UnsupportedKeywordError", "GrammarError", "EmptyLanguageError",
    "CompileLimitError", "VocabularyMismatchError", "ModelLoadError", "TokenBudgetExceeded", "OutputValidationError",
]
