"""How schemas resolve ``$ref``: never from files or the network unless the caller allows it.

jsonschema's default registry fetches any ``http(s)://`` ``$ref`` and reads ``file:`` ones; a
schema that arrives in a request could make the process send requests anywhere or read local
files into a constraint. Every place in constrained-spec that compiles or validates against a
schema builds its validator here (:func:`make_validator`), with a ``referencing.Registry`` whose
retrieval refuses everything (:class:`~constrained_spec.errors.RefRetrievalError`, naming the
reference) unless ``ref_allow`` lists it:

* a local folder (a path, or a ``file:`` URI of one): a ``file:`` ``$ref`` (or one without a
  scheme, looked up relative to each listed folder in turn) is read when it is a regular file
  strictly inside that folder after resolving symlinks; a ``..`` segment is refused outright;
* a URL prefix (``http://`` or ``https://``): a ``$ref`` with the same scheme and host whose
  path lies under the prefix's path is fetched with ``urllib`` (no redirects, bounded size and
  timeout).

Schemas without ``$schema`` are read by :data:`DEFAULT_DRAFT` (2020-12) rules unless a ``draft``
is given; a ``$schema`` in the schema always wins.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from constrained_spec.errors import RefRetrievalError, SchemaError

__all__ = [
    "DEFAULT_DRAFT",
    "DRAFTS",
    "MAX_REF_BYTES",
    "REF_TIMEOUT_S",
    "make_registry",
    "make_validator",
    "normalize_draft",
    "ref_error",
    "validation_errors",
    "validator_class",
]

#: the draft of schemas without ``$schema``
DEFAULT_DRAFT = "2020-12"
#: the drafts a caller may name (``draft=`` / ``--schema-draft``)
DRAFTS = ("2020-12", "2019-09", "7", "6", "4")
#: the largest document an allowed ``$ref`` may retrieve, in bytes
MAX_REF_BYTES = 1_000_000
#: the timeout of one allowed URL fetch, in seconds
REF_TIMEOUT_S = 5.0

_ALIASES = {"2020": "2020-12", "202012": "2020-12", "2019": "2019-09", "201909": "2019-09",
            "07": "7", "06": "6", "04": "4"}


def normalize_draft(draft: str | None) -> str | None:
    """``"draft-07"``, ``"draft7"``, ``"07"``, ``7`` -> ``"7"``; ``None`` stays ``None``.

    Raises ``ValueError`` naming the accepted values for anything else.
    """
    if draft is None:
        return None
    text = str(draft).strip().lower()
    for prefix in ("draft-", "draft"):
        if text.startswith(prefix):
            text = text[len(prefix):]
            break
    text = _ALIASES.get(text, text)
    if text not in DRAFTS:
        raise ValueError(f"unknown JSON Schema draft {draft!r}; choose one of {', '.join(DRAFTS)}")
    return text


def _classes() -> dict[str, type]:
    from jsonschema import validators as v

    return {"2020-12": v.Draft202012Validator, "2019-09": v.Draft201909Validator, "7": v.Draft7Validator,
            "6": v.Draft6Validator, "4": v.Draft4Validator}


def validator_class(schema: Any, draft: str | None = None) -> type:
    """The jsonschema validator class for ``schema``: its ``$schema`` if it names a known draft,
    else ``draft`` (default 2020-12); its regex keywords match in linear time
    (:func:`~constrained_spec.grammar.pattern_keywords.linear_validator`)."""
    from jsonschema.validators import validator_for

    from constrained_spec.grammar.pattern_keywords import linear_validator

    default = _classes()[normalize_draft(draft) or DEFAULT_DRAFT]
    return linear_validator(validator_for(schema, default=default))


# -- retrieval -----------------------------------------------------------------------------------


def _split_allow(ref_allow: Iterable[str]) -> tuple[list[Path], list[urllib.parse.SplitResult]]:
    folders: list[Path] = []
    urls: list[urllib.parse.SplitResult] = []
    for entry in ref_allow:
        if not isinstance(entry, str) or not entry:
            raise SchemaError(f"ref_allow entries must be non-empty strings, not {entry!r}")
        low = entry.lower()
        if low.startswith(("http://", "https://")):
            urls.append(urllib.parse.urlsplit(entry))
        elif low.startswith("file:"):
            folders.append(Path(urllib.request.url2pathname(urllib.parse.urlsplit(entry).path)))
        else:
            folders.append(Path(entry))
    return folders, urls


def _has_dotdot(path: str) -> bool:
    return ".." in urllib.parse.unquote(path).replace("\\", "/").split("/")


def _refuse(uri: str, why: str) -> RefRetrievalError:
    return RefRetrievalError(uri, why)


def _read_file(uri: str, path: str, folders: Sequence[Path]) -> bytes:
    if _has_dotdot(path):
        raise _refuse(uri, "a '..' path segment is not allowed")
    candidates = [Path(path)] if Path(path).is_absolute() else [f / path for f in folders]
    for candidate in candidates:
        try:
            real = candidate.resolve(strict=True)
        except (OSError, RuntimeError):
            continue
        for folder in folders:
            try:
                root = folder.resolve(strict=True)
            except (OSError, RuntimeError):
                continue
            if real != root and real.is_relative_to(root) and real.is_file():
                if real.stat().st_size > MAX_REF_BYTES:
                    raise _refuse(uri, f"the file is larger than {MAX_REF_BYTES} bytes")
                return real.read_bytes()
    raise _refuse(uri, "it is no file inside a folder listed in ref_allow")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise urllib.error.HTTPError(req.full_url, code, "redirects are not followed for $ref", headers, fp)


def _url_allowed(parts: urllib.parse.SplitResult, prefixes: Sequence[urllib.parse.SplitResult]) -> bool:
    for p in prefixes:
        if (parts.scheme.lower(), parts.netloc.lower()) != (p.scheme.lower(), p.netloc.lower()):
            continue
        base = p.path if p.path.endswith("/") else p.path + "/"
        if p.path in ("", "/") or parts.path == p.path or parts.path.startswith(base):
            return True
    return False


def _fetch(uri: str, parts: urllib.parse.SplitResult, prefixes: Sequence[urllib.parse.SplitResult]) -> bytes:
    if _has_dotdot(parts.path):
        raise _refuse(uri, "a '..' path segment is not allowed")
    if not _url_allowed(parts, prefixes):
        raise _refuse(uri, "it is under no URL prefix listed in ref_allow")
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(urllib.request.Request(uri, headers={"Accept": "application/json"}), timeout=REF_TIMEOUT_S) as resp:
            data = resp.read(MAX_REF_BYTES + 1)
    except OSError as exc:  # URLError, HTTPError, timeouts
        raise _refuse(uri, f"fetching it failed ({type(exc).__name__})") from None
    if len(data) > MAX_REF_BYTES:
        raise _refuse(uri, f"the document is larger than {MAX_REF_BYTES} bytes")
    return data


class _Retrieve:
    """The registry's retrieval: refuses every URI that ``ref_allow`` does not list."""

    def __init__(self, ref_allow: Sequence[str], draft: str | None) -> None:
        self.folders, self.urls = _split_allow(ref_allow)
        self.draft = normalize_draft(draft) or DEFAULT_DRAFT

    def __call__(self, uri: str) -> Any:
        from referencing import Resource
        from referencing.jsonschema import specification_with

        parts = urllib.parse.urlsplit(uri)
        scheme = parts.scheme.lower()
        if not self.folders and not self.urls:
            raise _refuse(uri, "schemas never read files or the network (list it in ref_allow to allow it)")
        if scheme in ("http", "https"):
            data = _fetch(uri, parts, self.urls)
        elif scheme == "file" and parts.netloc in ("", "localhost"):
            data = _read_file(uri, urllib.request.url2pathname(parts.path), self.folders)
        elif scheme == "" and not parts.netloc and parts.path:
            data = _read_file(uri, parts.path, self.folders)
        else:
            raise _refuse(uri, "only file paths and http(s) URLs listed in ref_allow are retrieved")
        try:
            contents = json.loads(data)
        except (ValueError, UnicodeDecodeError):
            raise _refuse(uri, "the retrieved document is not JSON") from None
        validator_class: Any = _classes()[self.draft]
        default = specification_with(validator_class.META_SCHEMA["$schema"])
        return Resource.from_contents(contents, default_specification=default)


def make_registry(ref_allow: Sequence[str] = (), draft: str | None = None) -> Any:
    """A ``referencing.Registry`` that retrieves only what ``ref_allow`` lists (nothing by
    default); documents it retrieves without ``$schema`` are read as ``draft``."""
    from referencing import Registry

    registry: Any = Registry  # referencing types ``retrieve`` through attrs, which mypy does not read
    return registry(retrieve=_Retrieve(tuple(ref_allow), draft))


def _options(options: Any, draft: str | None, ref_allow: Sequence[str] | None) -> tuple[str | None, tuple]:
    if draft is None and options is not None:
        draft = getattr(options, "draft", None)
    if ref_allow is None:
        ref_allow = getattr(options, "ref_allow", ()) if options is not None else ()
    return draft, tuple(ref_allow)


def make_validator(schema: Any, options: Any = None, *, draft: str | None = None,
                   ref_allow: Sequence[str] | None = None, format_checker: Any = None) -> Any:
    """A jsonschema validator for ``schema`` that retrieves no ``$ref`` outside ``ref_allow``.

    ``options`` (a :class:`~constrained_spec.grammar.json_schema.SchemaOptions` or anything with
    ``draft`` / ``ref_allow`` attributes) supplies the defaults of ``draft`` and ``ref_allow``.
    """
    draft, allow = _options(options, draft, ref_allow)
    cls = validator_class(schema, draft)
    kwargs = {"format_checker": format_checker} if format_checker is not None else {}
    return cls(schema, registry=make_registry(allow, draft), **kwargs)


def ref_error(exc: BaseException, ref: str = "", pointer: str = "") -> SchemaError | None:
    """The :class:`SchemaError` for a failed ``$ref`` lookup (``exc`` from referencing or
    jsonschema), or ``None`` when ``exc`` is no reference failure.

    A refused retrieval keeps its :class:`RefRetrievalError` message; any other unresolvable
    reference names ``ref`` (or the URI referencing reports) and never quotes documents.
    """
    from referencing.exceptions import Unresolvable

    seen = set()
    cur: BaseException | None = exc
    unresolvable: BaseException | None = None
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if isinstance(cur, RefRetrievalError):
            return RefRetrievalError(cur.uri, cur.reason, pointer or cur.pointer)
        if isinstance(cur, Unresolvable) and unresolvable is None:
            unresolvable = cur
        cur = cur.__cause__ or cur.__context__
    if unresolvable is None:
        return None
    name = ref or str(getattr(unresolvable, "ref", "") or "")
    return SchemaError(f"$ref {name!r} cannot be resolved ({type(unresolvable).__name__})", pointer)


def validation_errors(schema: Any, value: Any, options: Any = None, *, draft: str | None = None,
                      ref_allow: Sequence[str] | None = None) -> list:
    """Every ``jsonschema.ValidationError`` of ``value`` under ``schema`` (sorted by path).

    Raises :class:`SchemaError` (a :class:`RefRetrievalError` for a refused retrieval) when a
    ``$ref`` met while validating cannot be resolved without reading what is not allowed.
    """
    validator = make_validator(schema, options, draft=draft, ref_allow=ref_allow)
    try:
        return sorted(validator.iter_errors(value), key=lambda e: [str(p) for p in e.path])
    except Exception as exc:
        err = ref_error(exc)
        if err is None:
            raise
        raise err from None
