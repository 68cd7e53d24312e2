"""The OpenAI chat-completions protocol: the request model, the checks a request must pass
before anything runs, and the shapes of the response objects.

Refused by name with a 400 (they would change what the constraint guarantees or the sampled
distribution, or this server has no such thing): ``n`` other than 1, ``stop``, ``logprobs: true`` /
``top_logprobs``, non-zero ``presence_penalty`` / ``frequency_penalty``, a non-empty
``logit_bias``, ``functions`` / ``function_call`` (use ``tools``), ``audio``, ``modalities`` other
than ``["text"]``, ``prediction``, ``web_search_options``, ``reasoning_effort``, ``verbosity``; any
other undeclared field is unrecognized (400, as OpenAI does); vLLM's ``structured_outputs``,
``guided_grammar`` and ``guided_regex`` are declared (:mod:`.grammars`). Messages need a known
``role`` and text content (an assistant turn's ``tool_calls`` may be function or custom calls); text that is not valid Unicode (a lone surrogate) and NaN or Infinity anywhere in the
body are a 400. What these checks let through is then held to the OpenAPI document's typed body
(:data:`ChatRequestBody`, strict JSON types, :func:`check_typed`), which is made from the same
declaration (:class:`ChatCompletionRequest`, its ``Typed`` marks), so the two cannot drift.
Integer fields take a float without a fraction (5.0, 1e18: JSON Schema's integers).
"""

from __future__ import annotations

import math
import uuid
from typing import Annotated, Any, Callable, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from constrained_spec.config import MAX_DRAFT_TOKENS, MAX_PARTICLES
from constrained_spec.errors import TokenBudgetExceeded
from constrained_spec.serving.errors import APIError, validation_error
from constrained_spec.serving.schemas import (
    INTEGRAL,
    SEED_MAX,
    SEED_MIN,
    TOP_K_MAX,
    JSONFalse,
    Message,
    NonBlank,
    ResponseFormat,
    StreamOptions,
    StructuredOutputs,
    Tool,
    ToolChoice,
    Typed,
    Zero,
    typed_body,
)

__all__ = ["ChatCompletionRequest", "ChatRequestBody", "REFUSED", "ROLES", "SEED_MAX", "SEED_MIN", "TOP_K_MAX", "budget_usage", "check_messages",
           "check_typed", "check_unsupported", "check_values", "completion_body", "invalid_text", "non_finite_number", "new_call_id", "new_completion_id", "usage"]

ROLES = ("system", "developer", "user", "assistant", "tool", "function")
#: fields OpenAI defines that this server cannot serve, and why (refused with a 400 when given)
REFUSED = {
    "functions": "the legacy functions API; use 'tools'",
    "function_call": "the legacy functions API; use 'tool_choice'",
    "audio": "this server writes text only",
    "prediction": "predicted outputs",
    "web_search_options": "this server has no web search",
    "reasoning_effort": "not a reasoning model",
    "verbosity": "the constraint decides the length",
    # vLLM's older JSON and choice parameters (its grammar and regex ones are served: serving.grammars)
    "guided_json": "vLLM's parameter; use response_format {'type': 'json_schema', 'json_schema': {'name': ..., 'schema': ...}}",
    "guided_choice": "vLLM's parameter; write the choices as a grammar: structured_outputs {'grammar': 'start: \"a\" | \"b\"'}",
}


class ChatCompletionRequest(BaseModel):
    """The body of ``POST /v1/chat/completions``, declared once: each field's type here is what the
    named checks read (:func:`check_unsupported`, :func:`check_values`, :func:`check_messages`, so
    they can name the fault); a :class:`~.schemas.Typed` mark gives the field's narrower type in the
    typed body (:data:`ChatRequestBody`, the OpenAPI document's). Fields it does not declare are refused."""

    model_config = ConfigDict(extra="allow")

    model: str | None = Field(default=None, description="the served model's id (another is a 404)")
    messages: Annotated[list[dict[str, Any]], Typed(list[Message])] = Field(min_length=1)
    response_format: Annotated[dict[str, Any] | None, Typed(ResponseFormat | None)] = None
    tools: Annotated[list[dict[str, Any]] | None, Typed(list[Tool] | None)] = None
    tool_choice: Annotated[str | dict[str, Any] | None, Typed(ToolChoice | None)] = None
    parallel_tool_calls: bool | None = None
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: Annotated[int, Field(ge=0, le=TOP_K_MAX), INTEGRAL] | None = None
    seed: Annotated[int, Field(ge=SEED_MIN, le=SEED_MAX), INTEGRAL] | None = None
    max_tokens: Annotated[int, Field(ge=1), INTEGRAL] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1), INTEGRAL] | None = None
    n: Annotated[Annotated[int, INTEGRAL] | None, Typed(Annotated[int, Field(ge=1, le=1), INTEGRAL] | None)] = Field(
        default=None, description="one choice only")
    stream: bool = False
    stream_options: Annotated[dict[str, Any] | None, Typed(StreamOptions | None)] = None
    stop: Annotated[str | list[str] | None, Typed(Union[Literal[""], Annotated[list[str], Field(max_length=0)]] | None)] = Field(
        default=None, description="no stop sequences: the output ends where its constraint is complete")
    logprobs: Annotated[bool | None, Typed(JSONFalse | None)] = None
    top_logprobs: Annotated[Annotated[int, INTEGRAL] | None, Typed(Annotated[int, Field(ge=0, le=0), INTEGRAL] | None)] = None
    presence_penalty: Annotated[float | None, Typed(Zero | None)] = None
    frequency_penalty: Annotated[float | None, Typed(Zero | None)] = None
    logit_bias: Annotated[dict[str, Any] | None, Typed(Annotated[dict[str, Any], Field(max_length=0)] | None)] = Field(
        default=None, description="only {}")
    modalities: Annotated[list[str] | None, Typed(Annotated[list[Literal["text"]], Field(max_length=1)] | None)] = None
    num_draft_tokens: Annotated[int, Field(ge=0, le=MAX_DRAFT_TOKENS), INTEGRAL] | None = Field(
        default=None, description="draft tokens per step (this server's extension)")
    # sequence-level alignment (docs/smc.md): "local" (default) or "smc" with this many particles
    alignment: Literal["local", "smc"] | None = Field(default=None, description="sequence-level alignment (this server's extension)")
    particles: Annotated[int, Field(ge=1, le=MAX_PARTICLES), INTEGRAL] | None = Field(default=None, description="SMC particles (this server's extension)")
    schema_in_prompt: bool | None = Field(default=None, description="whether the schema is shown in the prompt (this server's extension)")
    # vLLM's grammar parameters (see :mod:`.grammars`): a Lark grammar or a regex for the content
    structured_outputs: Annotated[dict[str, Any] | None, Typed(StructuredOutputs | None)] = None
    guided_grammar: Annotated[str | None, Typed(NonBlank | None)] = Field(default=None, description="vLLM's older Lark grammar parameter")
    guided_regex: Annotated[str | None, Typed(NonBlank | None)] = Field(default=None, description="vLLM's older regex parameter")
    # accepted and ignored: they do not change the output
    user: Any = None
    metadata: Any = None
    store: Any = None
    service_tier: Any = None
    prompt_cache_key: Any = None
    safety_identifier: Any = None


#: the typed body of ``POST /v1/chat/completions`` (the OpenAPI document's, in strict JSON types),
#: made from :class:`ChatCompletionRequest`: its fields, with each :class:`~.schemas.Typed` type
ChatRequestBody: type[BaseModel] = typed_body(
    ChatCompletionRequest, "ChatRequestBody",
    "The body of ``POST /v1/chat/completions``. Fields OpenAI defines that would change what the\n"
    "    constraint guarantees or the sampled distribution are accepted only at their neutral value.")


def check_typed(body: dict[str, Any]) -> None:
    """``body`` (a request the named checks passed) against :data:`ChatRequestBody`; a 400 naming
    the first fault otherwise."""
    try:
        ChatRequestBody.model_validate(body)
    except ValidationError as exc:
        raise validation_error([dict(e) for e in exc.errors(include_url=False)]) from None


def check_unsupported(req: ChatCompletionRequest) -> None:
    """Refuse, by name, every field that is given and that this server cannot serve."""
    for name in req.model_extra or {}:
        if name in REFUSED:
            raise APIError(400, f"{name!r} is not supported ({REFUSED[name]})", param=name, code="unsupported_parameter")
        raise APIError(400, f"unrecognized request argument supplied: {name}", param=name, code="unsupported_parameter")
    if req.n not in (None, 1):
        raise APIError(400, f"n={req.n} is not supported: this server returns exactly one choice (n=1)", param="n", code="unsupported_parameter")
    if req.stop not in (None, [], ""):
        raise APIError(400, "stop sequences are not supported: the output ends where its constraint is complete", param="stop", code="unsupported_parameter")
    if req.logprobs or req.top_logprobs:
        name = "logprobs" if req.logprobs else "top_logprobs"
        raise APIError(400, f"{name} is not supported", param=name, code="unsupported_parameter")
    for name in ("presence_penalty", "frequency_penalty"):
        if getattr(req, name):
            raise APIError(400, f"{name} is not supported (it would change the sampled distribution)", param=name, code="unsupported_parameter")
    if req.logit_bias:
        raise APIError(400, "logit_bias is not supported (it would change the sampled distribution)", param="logit_bias", code="unsupported_parameter")
    if req.modalities not in (None, [], ["text"]):
        raise APIError(400, f"modalities {req.modalities} are not supported; only ['text']", param="modalities", code="unsupported_parameter")


def invalid_text(obj: Any, path: str = "") -> str | None:
    """The path of the first string (value or key) in ``obj`` that is not valid Unicode, if any."""
    return _first(obj, path, lambda x: isinstance(x, str) and not _is_unicode(x))


def non_finite_number(obj: Any, path: str = "") -> str | None:
    """The path of the first NaN or infinity in ``obj`` (not JSON, though Python's parser reads them), if any."""
    return _first(obj, path, lambda x: isinstance(x, float) and not math.isfinite(x))


def check_values(body: dict[str, Any]) -> None:
    """Every string of the request is valid Unicode and every number finite; 400 otherwise."""
    bad = invalid_text(body)
    if bad:
        raise APIError(400, f"{bad} is not valid Unicode text (it holds a lone surrogate such as an unpaired \\ud800 escape)",
                       param=bad, code="invalid_text")
    bad = non_finite_number(body)
    if bad:
        raise APIError(400, f"{bad} is not a finite number (NaN and Infinity are not JSON)", param=bad, code="invalid_number")


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _first(obj: Any, path: str, bad: Callable[[Any], bool]) -> str | None:
    """The path of the first value or key in ``obj`` for which ``bad`` holds, if any."""
    if bad(obj):
        return path
    if isinstance(obj, dict):
        for key, value in obj.items():
            sub = f"{path}.{key}" if path else str(key)
            found = _first(key, sub, bad) or _first(value, sub, bad)
            if found:
                return found
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            found = _first(value, f"{path}[{i}]", bad)
            if found:
                return found
    return None


def check_messages(messages: list[dict[str, Any]]) -> None:
    """Each message has a known role and text content (a string or text parts); 400 otherwise."""
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        role = m.get("role")
        if role is None:
            raise APIError(400, f"{where} has no 'role'", param=f"{where}.role", code="invalid_message")
        if role not in ROLES:
            raise APIError(400, f"{where}.role must be one of {list(ROLES)}, got {role!r}", param=f"{where}.role", code="invalid_message")
        content = m.get("content")
        calls = m.get("tool_calls")
        if calls is not None:
            if role != "assistant" or not isinstance(calls, list):
                raise APIError(400, f"{where}.tool_calls must be a list, on an assistant message", param=f"{where}.tool_calls", code="invalid_message")
            for j, call in enumerate(calls):
                if isinstance(call, dict) and call.get("type") == "custom":  # an OpenAI custom tool call
                    custom = call.get("custom")
                    if not isinstance(custom, dict) or not isinstance(custom.get("name"), str) or not isinstance(custom.get("input", ""), str):
                        raise APIError(400, f"{where}.tool_calls[{j}] must be {{'id', 'type': 'custom', 'custom': {{'name', 'input'}}}}",
                                       param=f"{where}.tool_calls[{j}]", code="invalid_message")
                    continue
                fn = call.get("function") if isinstance(call, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not isinstance(fn.get("arguments", ""), (str, dict)):
                    raise APIError(400, f"{where}.tool_calls[{j}] must be {{'id', 'type': 'function', 'function': {{'name', 'arguments'}}}}",
                                   param=f"{where}.tool_calls[{j}]", code="invalid_message")
        if content is None:
            if role == "assistant" and calls:
                continue
            raise APIError(400, f"{where} has no 'content'", param=f"{where}.content", code="invalid_message")
        if isinstance(content, str):
            continue
        if not isinstance(content, list):
            raise APIError(400, f"{where}.content must be a string or a list of text parts, got {type(content).__name__}",
                           param=f"{where}.content", code="invalid_message")
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            if kind != "text" or not isinstance(part.get("text"), str):
                raise APIError(400, f"{where}.content[{j}]: only text parts ({{'type': 'text', 'text': ...}}) are supported, got {kind!r}",
                               param=f"{where}.content[{j}]", code="invalid_message")


# -- response shapes ---------------------------------------------------------------------------


def new_completion_id() -> str:
    return "chatcmpl-" + uuid.uuid4().hex[:24]


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def usage(result: Any) -> dict:
    """The ``usage`` object of a finished generation."""
    prompt_tokens = int(getattr(result, "prompt_tokens", 0) or 0)  # counted by Generator.run when it tokenized the prompt
    return {"prompt_tokens": prompt_tokens, "completion_tokens": len(result.token_ids),
            "total_tokens": prompt_tokens + len(result.token_ids)}


def budget_usage(exc: TokenBudgetExceeded) -> dict:
    """Usage of a generation whose budget ran out (``Generator.run`` attaches the counts)."""
    prompt_tokens = int(exc.prompt_tokens or 0)
    completion = len(exc.token_ids) if exc.token_ids is not None else int(exc.max_new_tokens)
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion, "total_tokens": prompt_tokens + completion}


def completion_body(completion_id: str, created: int, model: str, message: dict, finish_reason: str, usage: dict,
                    extra: dict) -> dict:
    """A ``chat.completion`` object with one choice; ``extra`` is the ``constrained_spec`` field."""
    return {
        "id": completion_id, "object": "chat.completion", "created": created, "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason, "logprobs": None}],
        "usage": usage, "system_fingerprint": None, "constrained_spec": extra,
    }
