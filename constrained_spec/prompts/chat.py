"""Messages through the chat template: the one place a prompt's text and token ids are made."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from constrained_spec.config import SCHEMA_HINT_STYLES
from constrained_spec.prompts.schema_hint import schema_hint

__all__ = ["apply_chat_template", "has_chat_template", "hint_heads", "prompt_token_ids", "user_messages", "with_system_prefix", "with_system_text"]


def user_messages(prompt: str | Sequence[Mapping[str, Any]]) -> list[dict]:
    """A prompt as chat messages: a string becomes one user turn; messages are copied."""
    return [{"role": "user", "content": prompt}] if isinstance(prompt, str) else [dict(m) for m in prompt]


def with_system_text(msgs: list[dict], text: str) -> list[dict]:
    """``msgs`` with ``text`` appended to a leading system message, or in a new one."""
    if msgs and msgs[0].get("role") == "system":
        msgs[0] = {**msgs[0], "content": (str(msgs[0].get("content") or "") + "\n\n" + text).strip()}
    else:
        msgs.insert(0, {"role": "system", "content": text})
    return msgs


def with_system_prefix(msgs: list[dict], text: str) -> list[dict]:
    """``msgs`` with ``text`` first in a leading system message (before its own text), or in a new
    one: the same ``text`` then starts every prompt, whatever follows it."""
    if msgs and msgs[0].get("role") == "system":
        msgs[0] = {**msgs[0], "content": (text + "\n\n" + str(msgs[0].get("content") or "")).strip()}
    else:
        msgs.insert(0, {"role": "system", "content": text})
    return msgs


def has_chat_template(tokenizer: Any) -> bool:
    """Whether ``tokenizer`` carries a chat template."""
    return bool(getattr(tokenizer, "chat_template", None))


def apply_chat_template(tokenizer: Any, messages: Sequence[Mapping[str, Any]], tools: Sequence[dict] | None = None) -> str:
    """Prompt text ending where the assistant's reply starts.

    Through the tokenizer's chat template (with ``tools`` handed to it, for templates that render
    tools) when it has one; otherwise the contents joined by newlines (``tools`` unused).
    """
    if has_chat_template(tokenizer):
        kwargs = {"tools": list(tools)} if tools else {}
        return str(tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=True, **kwargs))
    return "\n".join(str(m.get("content", "")) for m in messages) + "\n"


def prompt_token_ids(
    tokenizer: Any,
    prompt: str | Sequence[Mapping[str, Any]] | Sequence[int],
    schema: Any = None,
    hint_style: str = "full",
    tools: Sequence[dict] | None = None,
    hint_place: str = "user",
) -> list[int]:
    """Token ids of ``prompt``: a list of token ids is the prompt itself (no template, no hint).

    Otherwise, with a ``schema`` (None: no hint) its :func:`schema_hint` is appended after a blank
    line to the last message (``hint_place="user"``) or put first in a leading system message
    (``"system"``: :func:`with_system_prefix`; calls with the same schema then share the prompt's
    first tokens), and the messages go through :func:`apply_chat_template`; with a
    template the text is tokenized without special tokens (the template wrote them), without one
    with them. ``tools`` needs a chat template (a ValueError otherwise).
    """
    if isinstance(prompt, (list, tuple)) and prompt and all(isinstance(t, int) for t in prompt):
        return [int(t) for t in prompt]  # token ids: the caller's own prompt, used as it is (no template, no hint)
    messages = user_messages(prompt)  # type: ignore[arg-type]  # not token ids (checked above)
    if schema is not None and hint_place == "system":
        messages = with_system_prefix(messages, schema_hint(schema, style=hint_style))
    elif schema is not None:
        messages[-1]["content"] = str(messages[-1]["content"]) + "\n\n" + schema_hint(schema, style=hint_style)
    if tools and not has_chat_template(tokenizer):
        raise ValueError("tools= needs a tokenizer with a chat template; without one, spell the tools in the "
                         "messages (constrained_spec.tools.tool_prompt_messages)")
    text = apply_chat_template(tokenizer, messages, tools)
    ids = tokenizer(text, add_special_tokens=False)["input_ids"] if has_chat_template(tokenizer) else tokenizer(text)["input_ids"]
    return list(ids)


#: schemas whose hints begin differently at once (a number, a string, an object, an array, an enum)
_HEAD_PROBES: tuple[Any, ...] = ({"type": "integer"}, {"type": "string"}, {"type": "object", "properties": {"a": {"type": "string"}}},
                                 {"type": "array", "items": {"type": "boolean"}}, {"enum": ["x", "y"]})


def hint_heads(tokenizer: Any, min_tokens: int = 8) -> list[list[int]]:
    """The first token ids every prompt with a schema hint in its system message starts with, one list per hint style:
    the chat header and the hint's first words, whatever the schema (the common prefix of prompts with unlike schemas
    and user texts; shorter than ``min_tokens``: left out). None without a chat template (no system message)."""
    if not has_chat_template(tokenizer):
        return []
    heads: list[list[int]] = []
    for style in SCHEMA_HINT_STYLES:
        prompts = [prompt_token_ids(tokenizer, text, schema, style, hint_place="system")
                   for text, schema in zip(("Tell me.", "Quote the 12 lines below"), _HEAD_PROBES * 2)]
        prompts += [prompt_token_ids(tokenizer, "Go", schema, style, hint_place="system") for schema in _HEAD_PROBES]
        n = min(len(p) for p in prompts)
        for i in range(n):
            if len({p[i] for p in prompts}) > 1:
                n = i
                break
        if n >= min_tokens and prompts[0][:n] not in heads:
            heads.append(prompts[0][:n])
    return heads
