"""OpenAI's error body, and the HTTP answer of every error a request can meet.

The body is ``{"error": {"message", "type", "param", "code"}}``. Each class of the project's
hierarchy (:mod:`constrained_spec.errors`, and :class:`~constrained_spec.tools.ToolError`) maps
to one status and code (:data:`ERROR_CODES`): bad schemas, grammars, tools and prompts are 400,
a value that fails post-validation 422, a model or sampling failure 500. The serving layer's own
conditions (:data:`SERVING_ERRORS`) are 401 (two ``Authorization`` headers), 408 (a body too slow
to arrive), 429 (full queue, full compile queue, a client's compiles, too many bodies being read at once; with
``Retry-After``), 499 (client gone), 503 (cancelled at shutdown) and 504 (timeout). Anything else, a plain
``ValueError`` included, is a bug: a 500 whose body names nothing internal, logged with its
traceback.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Mapping

from constrained_spec.errors import (
    CompileLimitError,
    ConfigError,
    ConstrainedSpecError,
    ContextLengthError,
    EmptyLanguageError,
    GrammarError,
    ModelLoadError,
    NoParticleLeftError,
    OutputValidationError,
    SamplingError,
    SchemaError,
    TokenBudgetExceeded,
    UnsupportedKeywordError,
    VocabularyMismatchError,
)
from constrained_spec.serving.refusals import (
    AmbiguousCredentials,
    BodyReadersFull,
    BodyTimeout,
    Cancelled,
    ClientCompilesFull,
    CompileQueueFull,
    QueueFull,
    QueueTimeout,
    ServerStopping,
)
from constrained_spec.tools import ToolError

__all__ = ["APIError", "ERROR_CODES", "INTERNAL_ERROR_MESSAGE", "SERVING_ERRORS", "api_error", "error_response", "http_error", "validation_error"]

log = logging.getLogger(__name__)

INVALID = "invalid_request_error"
SERVER = "server_error"
INTERNAL_ERROR_MESSAGE = "internal server error; the server log has the details"

#: each project error class -> (HTTP status, OpenAI error type, code); a class not listed answers
#: as its nearest listed base class (along its MRO), ConstrainedSpecError at the latest
ERROR_CODES: dict[type[ConstrainedSpecError], tuple[int, str, str]] = {
    ConstrainedSpecError: (400, INVALID, "constraint_error"),
    ConfigError: (400, INVALID, "invalid_parameter"),
    SchemaError: (400, INVALID, "invalid_schema"),
    UnsupportedKeywordError: (400, INVALID, "unsupported_schema_keyword"),  # RefRetrievalError too
    GrammarError: (400, INVALID, "grammar_error"),
    EmptyLanguageError: (400, INVALID, "empty_language"),
    CompileLimitError: (400, INVALID, "compile_limit"),
    ToolError: (400, INVALID, "invalid_tools"),
    ContextLengthError: (400, INVALID, "context_length_exceeded"),
    TokenBudgetExceeded: (400, INVALID, "token_budget_exceeded"),
    OutputValidationError: (422, "output_validation_error", "output_validation_failed"),
    ModelLoadError: (500, SERVER, "model_error"),
    VocabularyMismatchError: (500, SERVER, "model_error"),
    SamplingError: (500, SERVER, "sampling_error"),
    NoParticleLeftError: (400, INVALID, "no_particle_left"),
}
RATE = "rate_limit_error"
#: the serving layer's own conditions -> (HTTP status, OpenAI error type, code), one to one
SERVING_ERRORS: dict[type[Exception], tuple[int, str, str]] = {
    AmbiguousCredentials: (401, INVALID, "invalid_api_key"),
    BodyTimeout: (408, INVALID, "request_timeout"),
    QueueFull: (429, RATE, "queue_full"),
    CompileQueueFull: (429, RATE, "compile_queue_full"),
    ClientCompilesFull: (429, RATE, "too_many_compiles"),
    BodyReadersFull: (429, RATE, "too_many_uploads"),
    Cancelled: (499, INVALID, "client_closed_request"),
    QueueTimeout: (504, "timeout_error", "timeout"),
    ServerStopping: (503, SERVER, "server_shutting_down"),
}
#: the text before the exception's own message, per class of ERROR_CODES
PREFIXES: dict[type[ConstrainedSpecError], str] = {
    SchemaError: "invalid JSON Schema: ",
    GrammarError: "the constraint cannot be compiled: ",
    EmptyLanguageError: "the constraint admits no output: ",
    CompileLimitError: "the constraint is too large to compile: ",
}
#: the request field an error points at whatever the caller says (None: the message names the option)
FIXED_PARAMS: dict[type[ConstrainedSpecError], str | None] = {
    ContextLengthError: "messages", TokenBudgetExceeded: "max_tokens", ConfigError: None,
}


class APIError(Exception):
    """An error answered in OpenAI's error body."""

    def __init__(self, status: int, message: str, *, type: str = INVALID, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers  # sent with the answer (a 405's Allow)

    def body(self) -> dict:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}

    def to_json(self) -> bytes:
        """The body as JSON; ASCII-escaped, so no text of any request can break it."""
        return json.dumps(self.body(), ensure_ascii=True).encode()


def error_response(error: APIError) -> Any:
    """The HTTP response of ``error`` (a 429 says when to retry, a 405 which methods are allowed)."""
    from fastapi.responses import Response

    headers = {**(error.headers or {}), **({"Retry-After": "1"} if error.status == 429 else {})} or None
    return Response(error.to_json(), status_code=error.status, media_type="application/json", headers=headers)


def project_error(exc: ConstrainedSpecError, param: str | None = None) -> APIError:
    """The answer of one of the project's errors, by :data:`ERROR_CODES`."""
    cls = next(c for c in type(exc).__mro__ if c in ERROR_CODES)
    status, kind, code = ERROR_CODES[cls]
    if isinstance(exc, TokenBudgetExceeded):
        message = (f"the token budget of {exc.max_new_tokens} new tokens (max_tokens) ran out before the output was "
                   "complete; raise max_tokens or bound the schema (maxLength, maxItems, number ranges)")
    else:
        message = PREFIXES.get(cls, "") + str(exc)
    if status >= 500:
        log.error("%s while serving a request", type(exc).__name__, exc_info=exc)
        param = None
    elif cls in FIXED_PARAMS:
        param = FIXED_PARAMS[cls]
    elif cls is ToolError:
        param = param or "tools"
    return APIError(status, message, type=kind, param=param, code=code)


def api_error(exc: BaseException, param: str | None = None, *, request_timeout: float | None = None) -> APIError:
    """The HTTP error ``exc`` answers as; ``param`` is the request field a constraint error
    points at, ``request_timeout`` the seconds a 504 names."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, ConstrainedSpecError):
        return project_error(exc, param)
    for cls, (status, kind, code) in SERVING_ERRORS.items():
        if isinstance(exc, cls):
            return APIError(status, serving_message(exc, request_timeout), type=kind, code=code)
    log.error("internal error while serving a request", exc_info=exc)
    return APIError(500, INTERNAL_ERROR_MESSAGE, type=SERVER)


def serving_message(exc: Exception, request_timeout: float | None = None) -> str:
    """The client's message of one of :data:`SERVING_ERRORS`."""
    if isinstance(exc, Cancelled):
        return "the client closed the request"
    if isinstance(exc, QueueFull):
        return f"the server is busy: {exc.max_queue} requests are already waiting; retry later"
    if isinstance(exc, CompileQueueFull):
        return f"the server is busy: {exc.max_waiting} constraint compiles are already waiting (max_compile_queue); retry later"
    if isinstance(exc, ClientCompilesFull):
        return (f"too many compiles: this client has {exc.limit} constraint compiles under way already "
                "(max_compiles_per_client); retry later")
    if isinstance(exc, BodyReadersFull):
        return f"the server is busy: {exc.limit} requests are sending their bodies already (max_body_readers); retry later"
    if isinstance(exc, QueueTimeout):
        return f"the request did not finish within {request_timeout} s"
    if isinstance(exc, BodyTimeout):
        return f"the request body did not arrive within {exc.seconds:g} s (body_timeout)"
    if isinstance(exc, AmbiguousCredentials):
        return "more than one Authorization header: send exactly one, 'Authorization: Bearer <key>'"
    return str(exc)


def validation_error(errors: list[dict]) -> APIError:
    """The 400 of a body that fails the request model (``RequestValidationError.errors()``)."""
    parts = []
    for err in errors:
        loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
        parts.append(f"{loc}: {err.get('msg')}" if loc else str(err.get("msg")))
    first = errors[0] if errors else {}
    param = ".".join(str(x) for x in first.get("loc", ()) if x != "body") or None
    return APIError(400, "invalid request: " + "; ".join(parts), param=param, code="invalid_request")


def http_error(status: int, detail: Any, headers: Mapping[str, str] | None = None) -> APIError:
    """A routing error (unknown route 404, wrong method 405 with its ``Allow`` header) in OpenAI's shape."""
    kind = {404: "not_found", 405: "method_not_allowed"}.get(status)
    return APIError(status, str(detail), code=kind, headers=dict(headers) if headers else None)
