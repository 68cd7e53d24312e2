"""The server's OpenAPI document (``GET /openapi.json``), the reference of its API.

FastAPI writes the paths; this module gives each operation its typed request body and every
status it can answer, with its body (:mod:`.schemas`): errors in OpenAI's error body, ``/metrics``
as ``text/plain``, a streamed reply as ``text/event-stream``. The statuses follow the server's
limits (:mod:`.limits`): 408, 413 and 429 on every ``POST`` (the body is read by the guard), 401
on every route but ``/health`` when an API key is set (and the document then names the bearer
scheme). A configured ``max_tokens_limit`` is the documented maximum of ``max_tokens``, a
configured ``max_particles`` that of ``particles``.
"""

from __future__ import annotations

import copy
from typing import Any, Callable

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from constrained_spec.serving.config import ServerConfig
from constrained_spec.serving.protocol import ChatRequestBody
from constrained_spec.serving.schemas import (
    ChatCompletion,
    ChatCompletionChunk,
    ErrorBody,
    Health,
    ModelCard,
    ModelList,
)

__all__ = ["CHAT_EXAMPLES", "install_openapi", "openapi_document"]

REF = "#/components/schemas/{model}"
CHAT = "/v1/chat/completions"
USER = [{"role": "user", "content": "Invent a person."}]
#: the request examples the document carries (each one the server answers 200)
CHAT_EXAMPLES: dict[str, dict[str, Any]] = {
    "text": {"summary": "free text", "value": {"messages": USER, "max_tokens": 8, "seed": 1}},
    "json_schema": {"summary": "a JSON value of a schema", "value": {
        "messages": USER, "max_tokens": 48, "seed": 1, "response_format": {"type": "json_schema", "json_schema": {
            "name": "person", "strict": True, "schema": {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}},
                                                         "required": ["name"], "additionalProperties": False}}}}},
    "json_object": {"summary": "any JSON object", "value": {"messages": USER, "max_tokens": 16, "seed": 1, "stream": True,
                                                            "response_format": {"type": "json_object"}}},
    "tools": {"summary": "a function call", "value": {
        "messages": USER, "max_tokens": 48, "seed": 1, "tool_choice": "required", "tools": [{"type": "function", "function": {
            "name": "add", "strict": True, "parameters": {"type": "object", "properties": {"a": {"type": "integer", "minimum": 0, "maximum": 9}},
                                                          "required": ["a"], "additionalProperties": False}}}]}},
    "grammar": {"summary": "vLLM's structured_outputs grammar", "value": {"messages": USER, "structured_outputs": {"grammar": 'start: "yes" | "no"'}}},
}
ERRORS = {
    400: "a request the server does not take: a field outside the document, or what a shape cannot say (a schema or grammar that does "
         "not compile, a tool_choice naming no listed tool, a prompt over the context, a field refused by name); the code names it",
    401: "no or a wrong API key ('Authorization: Bearer <key>'), or two Authorization headers",
    404: "another model than the one served",
    408: "the body did not arrive within body_timeout",
    413: "the body is over max_body_bytes",
    422: "a value the constraint admitted failed its post-validation (output_validation_failed)",
    429: "the queue, the compile queue, this client's compiles or the body readers are full; Retry-After says when to retry",
    500: "the model or sampling failed (a broken model or a bug; never for a request's content); the body names nothing internal",
    503: "the server shut down before the request finished (cancelled once shutdown_timeout ran out); retry it",
    504: "the request did not finish within request_timeout",
}
#: the error statuses of each operation (401 added when an API key is set)
OPERATION_ERRORS: dict[tuple[str, str], tuple[int, ...]] = {
    ("/health", "get"): (),
    ("/metrics", "get"): (),
    ("/v1/models", "get"): (),
    ("/v1/models/{model_id}", "get"): (404,),
    ("/v1/responses", "post"): (404, 408, 413, 429),
    (CHAT, "post"): (400, 404, 408, 413, 422, 429, 500, 503, 504),
}


#: one event of a streamed reply (OpenAPI 3.1: a text/event-stream schema describes each event)
SSE_EVENT: dict[str, Any] = {
    "type": "object", "required": ["data"], "description": (
        "server-sent events: a ChatCompletionChunk as JSON per event, then [DONE]; an error after the first event is an ErrorBody event"),
    "properties": {"event": {"type": "string"}, "data": {"anyOf": [
        {"const": "[DONE]"},
        {"type": "string", "contentMediaType": "application/json", "contentSchema": {
            "anyOf": [{"$ref": REF.format(model="ChatCompletionChunk")}, {"$ref": REF.format(model="ErrorBody")}]}}]}},
}


def _json(ref: str, description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": {"$ref": REF.format(model=ref)}}}}


def _ok(path: str) -> dict[str, Any]:
    """The ``responses`` entry of a 200 on ``path`` (none on ``/v1/responses``, always a 404)."""
    if path == "/v1/responses":
        return {}
    if path == "/metrics":
        return {"200": {"description": "the Prometheus text exposition", "content": {"text/plain": {"schema": {"type": "string"}}}}}
    if path == CHAT:
        answer = _json("ChatCompletion", "the reply (stream false), or a stream of ChatCompletionChunk events (stream true)")
        answer["content"]["text/event-stream"] = {"schema": SSE_EVENT}
        return {"200": answer}
    model = {"/health": "Health", "/v1/models": "ModelList", "/v1/models/{model_id}": "ModelCard"}[path]
    return {"200": _json(model, "OK")}


def _components() -> dict[str, Any]:
    models: list[type[BaseModel]] = [ChatRequestBody, ChatCompletion, ChatCompletionChunk, ErrorBody, Health, ModelCard, ModelList]
    modes = [(m, "validation" if m is ChatRequestBody else "serialization") for m in models]
    _, defs = models_json_schema(modes, ref_template=REF)  # type: ignore[arg-type]
    return dict(defs.get("$defs", {}))


def _examples(config: ServerConfig) -> dict[str, Any]:
    """:data:`CHAT_EXAMPLES` within ``config``'s ``max_tokens_limit``."""
    examples = copy.deepcopy(CHAT_EXAMPLES)
    limit = config.max_tokens_limit
    for example in examples.values():
        if limit is not None and example["value"].get("max_tokens", 0) > limit:
            example["value"]["max_tokens"] = limit
    return examples


def openapi_document(base: dict[str, Any], config: ServerConfig) -> dict[str, Any]:
    """``base`` (FastAPI's document of the routes) with the typed bodies and every answer."""
    doc = copy.deepcopy(base)
    schemas = _components()
    limits = {"max_tokens": config.max_tokens_limit, "max_completion_tokens": config.max_tokens_limit, "particles": config.max_particles}
    for name, limit in limits.items():
        field = schemas["ChatRequestBody"]["properties"][name]
        for option in field.get("anyOf", [field]):
            if limit is not None and option.get("type") == "integer":
                option["maximum"] = min(limit, option.get("maximum", limit))
    doc.setdefault("components", {})["schemas"] = schemas
    for path, methods in doc.get("paths", {}).items():
        for method, operation in methods.items():
            statuses = OPERATION_ERRORS.get((path, method), ())
            if config.api_key is not None and path != "/health":
                statuses = (*statuses, 401)
                operation["security"] = [{"bearer": []}]
            responses = _ok(path) if (path, method) in OPERATION_ERRORS else dict(operation.get("responses", {}))
            responses.pop("422", None)  # FastAPI's validation answer: this server answers 400 with OpenAI's body
            for status in sorted(statuses):
                responses[str(status)] = _json("ErrorBody", ERRORS[status])
            operation["responses"] = responses
            if path == CHAT and method == "post":
                operation["requestBody"] = {"required": True, "content": {"application/json": {
                    "schema": {"$ref": REF.format(model="ChatRequestBody")}, "examples": _examples(config)}}}
    if config.api_key is not None:
        doc["components"]["securitySchemes"] = {"bearer": {"type": "http", "scheme": "bearer"}}
    return doc


def install_openapi(app: Any, config: ServerConfig) -> None:
    """Serve :func:`openapi_document` as ``app``'s document (built once, on first use)."""
    default: Callable[[], dict[str, Any]] = app.openapi

    def build() -> dict[str, Any]:
        if app.openapi_schema is None:
            app.openapi_schema = openapi_document(default(), config)
        return app.openapi_schema

    app.openapi = build
