"""Schemathesis hooks of the contract test (``SCHEMATHESIS_HOOKS=contract_checks``): a schema-valid
request the server refuses must be refused for what the request means, never for its shape."""

from __future__ import annotations

import schemathesis

#: the codes of a 400 that judge a request's shape: answering one to a schema-valid request means
#: the document accepts what the server does not (invalid_request also names two grammars given at
#: once, which no shape of the document forbids)
SHAPE_CODES = {"invalid_request", "invalid_message", "invalid_text", "invalid_number"}
MEANINGS = ("give one grammar",)


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
    if code in SHAPE_CODES and not message.startswith(MEANINGS):
        raise AssertionError(f"a schema-valid request was refused for its shape ({code}): {message}")
    return None
