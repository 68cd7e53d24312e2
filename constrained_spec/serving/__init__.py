"""An OpenAI-compatible HTTP server over one :class:`~constrained_spec.api.Generator`.

``create_app(generator, ServerConfig(...))`` returns a FastAPI app (:class:`~.config.ServerConfig`:
its id, limits and timeouts; the defaults are ``constrained-spec serve``'s) with

* ``POST /v1/chat/completions`` - OpenAI chat completions. Every reply is produced under an
  exact constraint and validated before it is returned:

  - ``response_format`` (json_schema, json_object, text) and ``tools`` / ``tool_choice`` /
    ``parallel_tool_calls`` (default true, as OpenAI's: the model may write 1-4 calls): see
    :mod:`.completion` and :mod:`constrained_spec.tools`.
  - Lark grammars: vLLM's ``structured_outputs: {"grammar": ...}`` / ``guided_grammar`` (and
    their regex forms), and OpenAI custom tools whose format is a Lark grammar or a regex
    (``{"type": "custom", "custom": {"name", "format": {"type": "grammar", ...}}}``): see
    :mod:`.grammars`.
  - ``temperature`` (default 1, as OpenAI), ``top_p``, ``seed``, ``max_tokens`` /
    ``max_completion_tokens``, ``stream``, ``stream_options``; extensions ``top_k``,
    ``num_draft_tokens``, ``schema_in_prompt``. ``user``, ``metadata``, ``store``,
    ``service_tier``, ``prompt_cache_key`` and ``safety_identifier`` are accepted and ignored
    (they do not change the output). Fields this server cannot serve are refused by name with a
    400 (:mod:`.protocol`).
  - ``model`` must be the served model's id (``GET /v1/models``); another is a 404
    ``model_not_found``.
  - ``stream: true`` answers with server-sent events (:mod:`.streaming`).

  The response has the OpenAI shape (``choices[0].message.content`` holds the JSON text, or
  ``tool_calls``), ``usage``, and an extra ``constrained_spec`` field with the decoding stats.
  A token budget (``max_tokens``) that runs out before the output is complete is a 200 with
  ``finish_reason: "length"`` and the partial text (partial tool-call arguments), as OpenAI's;
  such text is not a complete value of the constraint.

* ``GET /v1/models``, ``GET /v1/models/{id}``, ``GET /health`` and ``GET /metrics`` (Prometheus'
  text format, behind the API key like every route but ``/health``: :mod:`.metrics`).

Errors use OpenAI's ``{"error": {"message", "type", "param", "code"}}`` body (:mod:`.errors`),
request validation and unknown routes included: the project's errors map one to one to codes
(schema, grammar, tool and prompt errors 400, a prompt over the context a 400
``context_length_exceeded``, post-validation 422), a missing, wrong or doubled API key is 401, an unknown
model 404, a body too slow to arrive 408, a full queue or compile queue 429, a client gone 499, a
request that outlives ``request_timeout`` 504; anything else (a
plain ``ValueError`` included) is a 500 that names no internals, logged with its traceback.
Invalid output is never returned.

Limits (:mod:`.limits`): the API key (exactly one ``Authorization`` header), the body cap (413),
the body's read time (408) and the number of bodies read at once (429), the schema and grammar
caps and the schema's property count (400). As many generations run at once as the generator has
batch slots (``max_batch_size``: they decode together as rows of one batch), else one
(:mod:`.scheduler`): more requests wait in a bounded queue; constraints compile off the
generation workers through a bounded compile queue with a per-compile budget, behind a cache
(:mod:`.compiles`); a timed-out or abandoned request stops after its current decode step and frees
its row, an abandoned compile is stopped. Freed memory goes back to the system when idle
(:mod:`.memory`).

``constrained-spec serve`` (:mod:`constrained_spec.cli.serve`) runs the server with uvicorn.

Modules: :mod:`.protocol` (request model, request checks, response shapes), :mod:`.completion`
(what a request generates, the reply message), :mod:`.errors`, :mod:`.refusals`, :mod:`.limits`,
:mod:`.scheduler`, :mod:`.compiles`, :mod:`.memory`, :mod:`.streaming`, :mod:`.metrics`, :mod:`.config` (``ServerConfig``)
and :mod:`.app` (``create_app``).
"""

from __future__ import annotations

from constrained_spec.serving.app import create_app
from constrained_spec.serving.config import ServerConfig
from constrained_spec.serving.errors import APIError, api_error
from constrained_spec.serving.limits import API_KEY_ENV, MAX_BODY_BYTES, MAX_GRAMMAR_CHARS, MAX_SCHEMA_CHARS
from constrained_spec.serving.protocol import ChatCompletionRequest
from constrained_spec.serving.scheduler import Cancelled, GenerationQueue, QueueFull, QueueTimeout

__all__ = ["API_KEY_ENV", "MAX_BODY_BYTES", "MAX_GRAMMAR_CHARS", "MAX_SCHEMA_CHARS", "APIError", "Cancelled", "ChatCompletionRequest",
           "GenerationQueue", "QueueFull", "QueueTimeout", "ServerConfig", "api_error", "create_app"]
