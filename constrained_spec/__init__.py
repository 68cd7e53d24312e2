"""constrained-spec: exact grammar-constrained speculative decoding.

Outputs follow a JSON Schema, a Pydantic model or a regex; a draft model proposes tokens and the
target verifies them, with the grammar mask applied to both before acceptance.
"""

from .api import Generator, GenerationResult, generate, generate_json
from .errors import (
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
from .grammar import Regex
from .sampling import SamplingPolicy

__version__ = "0.1.0"

__all__ = [
    "Generator", "GenerationResult", "generate", "generate_json", "Regex", "SamplingPolicy",
    "ConstrainedSpecError", "SchemaError", "UnsupportedKeywordError", "GrammarError", "EmptyLanguageError",
    "CompileLimitError", "VocabularyMismatchError", "ModelLoadError", "TokenBudgetExceeded", "OutputValidationError",
]
