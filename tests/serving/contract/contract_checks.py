"""Schemathesis hooks of the contract test (``SCHEMATHESIS_HOOKS=contract_checks``): a schema-valid
request the server refuses must be refused for what the request means, never for its shape."""

from __future__ import annotations

import schemathesis

#: the codes of a 400 that judge a request's shape: answering one to a schema-valid request means
#: the document accepts what the server does not ...
SHAPE_CODES = {"invalid_request", "invalid_message", "invalid_text", "invalid_number", "unsupported_parameter"}
#: ... but for these, which judge what fields mean together (no shape of the document forbids them)
MEANINGS = ("give one grammar", "stream with a custom tool call", "tool_choice ")
#: the 400s without a code that judge a shape (the others without one judge a meaning: a grammar
#: with a schema, tool_choice against the tools)
SHAPE_MESSAGES = ("response_format json_schema needs", "response_format.json_schema.schema must be", "response_format type",
                  "max_tokens=", "particles=", "structured_outputs must be an object")


@schemathesis.check
def meaningful_rejection(ctx, response, case):
    """A 400 to a schema-valid request names a meaning (grammar_error, invalid_schema, ...), not a shape."""
    meta = case.meta
    if meta is None or not meta.generation.mode.is_positive or response.status_code != 400:
        return None
    try:
        error = response.json()["error"]
    except Exception:  # noqa: BLE001 - response_schema_conformance judges the body's shape
        return None
    code, message = error.get("code"), str(error.get("message"))
    if (code in SHAPE_CODES and not message.startswith(MEANINGS)) or (code is None and message.startswith(SHAPE_MESSAGES)):
        raise AssertionError(f"a schema-valid request was refused for its shape ({code}): {message}")
    return None
