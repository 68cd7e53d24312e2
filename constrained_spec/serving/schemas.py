"""The typed shapes of the server's OpenAPI document: each operation's request and answers.

The chat request's typed body (:data:`.protocol.ChatRequestBody`) is made by :func:`typed_body`
from the one declaration of the request (:class:`.protocol.ChatCompletionRequest`), with the
shapes here for its structured fields (messages by role with their content parts, each
``response_format`` variant, function and custom tools, ``tool_choice``, vLLM's
``structured_outputs`` / ``guided_*``), in strict JSON types: a request that passes the protocol's
own checks (which name the fault) is validated against it too, so the document says no more and no
less than the server takes. What a shape cannot say is answered 400 with a named code: a JSON
Schema or grammar that does not compile, a ``tool_choice`` naming no listed tool, a prompt over the
context. The answers (:class:`ChatCompletion`, :class:`ChatCompletionChunk`, :class:`ErrorBody`,
...) are the shapes :mod:`.protocol`, :mod:`.completion` and :mod:`.streaming` write; only the
document uses them.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema, create_model, model_validator

__all__ = ["ChatCompletion", "ChatCompletionChunk", "ErrorBody", "Health", "INTEGRAL", "ModelCard", "ModelList", "Typed", "typed_body"]

#: the seeds a random generator takes (a signed or unsigned 64-bit integer)
SEED_MIN, SEED_MAX = -(1 << 63), (1 << 64) - 1
#: the largest top_k (a 64-bit integer; any top_k at or over the vocabulary size keeps every token)
TOP_K_MAX = (1 << 63) - 1
#: a text with something in it: what ``str.strip()`` leaves non-empty (Python's whitespace is the
#: regex's \s and \x1c-\x1f)
NON_BLANK = r"[^\s\x1c-\x1f]"
TOOL_NAME = r"^[A-Za-z0-9_-]{1,64}$"


def _integral(value: Any) -> Any:
    """A float with no fraction as the integer it is (JSON Schema's integer: 5.0 and 1e20 are integers)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _false(value: bool) -> bool:
    if value:
        raise ValueError("only false is supported")
    return value


#: a JSON integer, after an ``int``'s constraints: an int, or a float without a fraction (never a
#: bool or a string); ``Annotated[int, Field(ge=...), INTEGRAL]`` (the bounds first, so the document shows them)
INTEGRAL = BeforeValidator(_integral)
#: ``false`` (a bool; 0 is not one)
JSONFalse = Annotated[bool, AfterValidator(_false), WithJsonSchema({"const": False})]
#: a text with something in it (a grammar or a regex)
NonBlank = Annotated[str, Field(pattern=NON_BLANK)]


class Open(BaseModel):
    """A JSON object in strict JSON types whose undeclared keys are accepted (and ignored)."""

    model_config = ConfigDict(strict=True, extra="allow")


class Closed(BaseModel):
    """A JSON object in strict JSON types whose undeclared keys are refused."""

    model_config = ConfigDict(strict=True, extra="forbid")


# -- messages ----------------------------------------------------------------------------------


class TextPart(Open):
    """A text content part (the only kind this server reads)."""

    type: Literal["text"]
    text: str


Content = Union[str, list[TextPart]]


class FunctionCallSpec(Open):
    name: str
    arguments: Union[str, dict[str, Any]] = ""


class FunctionCall(Open):
    """A function call in an assistant turn of the history."""

    id: Any = None
    type: Literal["function"] = "function"
    function: FunctionCallSpec


class CustomCallSpec(Open):
    name: str
    input: str = ""


class CustomCall(Open):
    """A custom tool call in an assistant turn of the history."""

    id: Any = None
    type: Literal["custom"]
    custom: CustomCallSpec


class _Turn(Open):
    content: Content
    tool_calls: None = Field(default=None, description="only assistant turns carry tool calls")


class SystemMessage(_Turn):
    role: Literal["system"]


class DeveloperMessage(_Turn):
    role: Literal["developer"]


class UserMessage(_Turn):
    role: Literal["user"]


class ToolMessage(_Turn):
    role: Literal["tool"]


class FunctionMessage(_Turn):
    role: Literal["function"]


def _content_or_calls(schema: dict[str, Any]) -> None:
    schema["anyOf"] = [{"required": ["content"], "properties": {"content": {"not": {"type": "null"}}}},
                       {"required": ["tool_calls"], "properties": {"tool_calls": {"type": "array", "minItems": 1}}}]


class AssistantMessage(Open):
    """An assistant turn: text content, tool calls, or both (at least one)."""

    model_config = ConfigDict(json_schema_extra=_content_or_calls)

    role: Literal["assistant"]
    content: Content | None = None
    tool_calls: list[Union[CustomCall, FunctionCall]] | None = None

    @model_validator(mode="after")
    def _has_something(self) -> AssistantMessage:
        if self.content is None and not self.tool_calls:
            raise ValueError("an assistant message needs 'content' or 'tool_calls'")
        return self


Message = Annotated[Union[SystemMessage, DeveloperMessage, UserMessage, AssistantMessage, ToolMessage, FunctionMessage],
                    Field(discriminator="role")]


# -- response_format ---------------------------------------------------------------------------


class TextFormat(Open):
    """Free text, ended by EOS or the token budget (the default)."""

    type: Literal["text"]


class JSONObjectFormat(Open):
    """Any JSON object."""

    type: Literal["json_object"]


class JSONSchemaSpec(Open):
    name: str | None = None
    description: str | None = None
    schema_: Union[dict[str, Any], bool] = Field(alias="schema", description="a JSON Schema; one this server cannot compile is a 400 naming why")
    strict: bool | None = Field(default=None, description="accepted and ignored: the schema is always enforced exactly")


class JSONSchemaFormat(Open):
    """A JSON value valid against ``json_schema.schema``."""

    type: Literal["json_schema"]
    json_schema: JSONSchemaSpec


ResponseFormat = Annotated[Union[TextFormat, JSONObjectFormat, JSONSchemaFormat], Field(discriminator="type")]


# -- tools -------------------------------------------------------------------------------------


class FunctionSpec(Open):
    name: Annotated[str, Field(pattern=TOOL_NAME)]
    description: str | None = None
    parameters: dict[str, Any] | None = Field(default=None, description="a JSON Schema of the arguments (none: no arguments)")
    strict: bool | None = Field(default=None, description="accepted; the arguments always follow the schema exactly")


class FunctionTool(Open):
    """A function tool; its call's arguments follow ``function.parameters``."""

    type: Literal["function"] = "function"
    function: FunctionSpec


class GrammarDefinition(Open):
    syntax: Literal["lark", "regex"]
    definition: NonBlank


class TextInput(Open):
    type: Literal["text"]


class GrammarInput(Open):
    """A grammar format: ``{"type": "grammar", "grammar": {"syntax", "definition"}}`` (or the
    Responses API's flat ``{"type": "grammar", "syntax", "definition"}``)."""

    type: Literal["grammar"]
    grammar: GrammarDefinition | None = None
    syntax: Literal["lark", "regex"] | None = None
    definition: NonBlank | None = None


class CustomSpec(Open):
    name: Annotated[str, Field(pattern=TOOL_NAME)]
    description: str | None = None
    format: Annotated[Union[TextInput, GrammarInput], Field(discriminator="type")] | None = None


class CustomTool(Open):
    """An OpenAI custom tool, its input free text or in a Lark grammar or regex."""

    type: Literal["custom"]
    custom: CustomSpec


Tool = Union[CustomTool, FunctionTool]


class NamedFunction(Open):
    name: str


class FunctionChoice(Open):
    """Call this function tool."""

    type: Literal["function"] = "function"
    function: NamedFunction


class CustomChoice(Open):
    """Call this custom tool."""

    type: Literal["custom"]
    custom: NamedFunction


ToolChoice = Union[Literal["none", "auto", "required"], CustomChoice, FunctionChoice]


# -- vLLM's grammar parameters -------------------------------------------------------------------


class StructuredOutputs(Closed):
    """vLLM's ``structured_outputs``: one of ``grammar`` (Lark) or ``regex``; its JSON options are
    accepted and ignored."""

    grammar: NonBlank | None = None
    regex: NonBlank | None = None
    disable_fallback: Any = None
    disable_any_whitespace: Any = None
    disable_additional_properties: Any = None
    whitespace_pattern: Any = None
    json_: None = Field(default=None, alias="json", description="refused: use response_format json_schema")
    json_object: None = Field(default=None, description="refused: use response_format json_object")
    choice: None = Field(default=None, description="refused: write the choices as a grammar")
    structural_tag: None = Field(default=None, description="refused")


class StreamOptions(Open):
    include_usage: bool | None = None


Zero = Annotated[float, Field(ge=0, le=0, description="only 0 (the sampled distribution is never changed)")]


@dataclass(frozen=True)
class Typed:
    """A request field's type in the typed body (``Annotated[loose, Typed(typed)]``), where it is
    narrower than the type the protocol's named checks read."""

    annotation: Any


def typed_body(model: type[BaseModel], name: str, doc: str) -> type[BaseModel]:
    """``model``'s fields as a :class:`Closed` model named ``name`` (strict JSON types, undeclared
    keys refused), each of the type its :class:`Typed` mark gives (of its own type without one);
    defaults, bounds and descriptions as ``model`` declares them."""
    fields: dict[str, Any] = {}
    for field, info in model.model_fields.items():
        marks = [m for m in info.metadata if isinstance(m, Typed)]
        kept = copy.copy(info)
        kept.metadata = [m for m in info.metadata if not isinstance(m, Typed)]
        fields[field] = (marks[0].annotation if marks else info.annotation, kept)
    return create_model(name, __base__=Closed, __doc__=doc, __module__=model.__module__, **fields)


# -- answers -----------------------------------------------------------------------------------


class ErrorDetail(BaseModel):
    message: str
    type: str
    param: str | None
    code: str | None


class ErrorBody(BaseModel):
    """OpenAI's error body; every error the server answers has it."""

    error: ErrorDetail


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ReplyCall(BaseModel):
    id: str
    type: Literal["function", "custom"]
    function: FunctionCallSpec | None = None
    custom: CustomCallSpec | None = None


class ReplyMessage(BaseModel):
    role: Literal["assistant"]
    content: str | None
    refusal: None = None
    tool_calls: list[ReplyCall] | None = None


class Choice(BaseModel):
    index: int
    message: ReplyMessage
    finish_reason: Literal["stop", "length", "tool_calls"]
    logprobs: None = None


class Extension(BaseModel):
    """This server's own field: the decoding statistics (None when the budget ran out) and the mode."""

    stats: dict[str, Any] | None
    mode: Literal["text", "json", "tools", "grammar", "custom_tool"]


class ChatCompletion(BaseModel):
    """A ``chat.completion`` with one choice."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[Choice] = Field(min_length=1, max_length=1)
    usage: Usage
    system_fingerprint: None = None
    constrained_spec: Extension


class CallDelta(BaseModel):
    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: dict[str, Any] | None = None


class Delta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[CallDelta] | None = None


class ChunkChoice(BaseModel):
    index: int
    delta: Delta
    finish_reason: Literal["stop", "length", "tool_calls"] | None
    logprobs: None = None


class ChatCompletionChunk(BaseModel):
    """One ``data:`` event of a streamed reply (``text/event-stream``; the last event is
    ``data: [DONE]``; an error after the first event is an :class:`ErrorBody` event)."""

    id: str
    object: Literal["chat.completion.chunk"]
    created: int
    model: str
    system_fingerprint: None = None
    choices: list[ChunkChoice]
    usage: Usage | None = None


class QueueState(BaseModel):
    pending: int
    running: int
    waiting: int
    max_queue: int | None


class Health(BaseModel):
    status: Literal["ok"]
    model: str
    queue: QueueState


class ModelCard(BaseModel):
    id: str
    object: Literal["model"]
    created: int
    owned_by: str


class ModelList(BaseModel):
    object: Literal["list"]
    data: list[ModelCard]
