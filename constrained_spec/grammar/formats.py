"""Regexes (ECMA-262 syntax, anchored) for JSON Schema ``format`` values.

Each pattern describes a *subset* of the strings the format allows (RFC 3339 dates and times,
RFC 5321-style e-mail addresses, RFC 3986 URIs, ...), chosen so that every accepted string
is valid under the format's specification and under the ``jsonschema`` format checkers, and
so that the common spellings are accepted.  Restricting is sound: it never lets an invalid
value through.  None of the patterns contains a character that JSON must escape, so the
pattern text applies to encoded and decoded strings alike.
"""

from __future__ import annotations

from typing import Optional

__all__ = [
    "FORMAT_PATTERNS",
    "format_pattern",
    "SUPPORTED_FORMATS",
    "SPEC_FORMATS",
    "is_spec_format",
]

_YEAR = "[0-9]{4}"
# month-day combinations that exist in every year, plus Feb 29 only in leap years
_MD_COMMON = (
    "(0[1-9]|1[0-2])-(0[1-9]|1[0-9]|2[0-8])"
    "|(0[13-9]|1[0-2])-(29|30)"
    "|(0[13578]|1[02])-31"
)
_LEAP_YEAR = "([0-9]{2}(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)"
_DATE = f"({_YEAR}-({_MD_COMMON})|{_LEAP_YEAR}-02-29)"
_TIME = "([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])"
_DEC_OCTET = "(25[0-5]|2[0-4][0-9]|1[0-9]{2}|[1-9]?[0-9])"
_IPV4 = f"{_DEC_OCTET}(\\.{_DEC_OCTET}){{3}}"
_H16 = "[0-9a-fA-F]{1,4}"


def _ipv6() -> str:
    alts = [f"{_H16}(:{_H16}){{7}}"]
    # compressed forms with i groups before '::' and j after, i + j <= 7
    for i in range(0, 8):
        for j in range(0, 8 - i):
            if i + j > 6:
                continue
            left = "" if i == 0 else (_H16 if i == 1 else f"{_H16}(:{_H16}){{{i - 1}}}")
            right = "" if j == 0 else (_H16 if j == 1 else f"{_H16}(:{_H16}){{{j - 1}}}")
            alts.append(f"{left}::{right}")
    return "(" + "|".join(alts) + ")"


# a DNS label without consecutive hyphens (so no IDNA "xn--" A-labels), at most 61 chars
_LABEL = "[A-Za-z0-9]([A-Za-z0-9]|-[A-Za-z0-9]){0,30}"
_HOSTNAME = f"{_LABEL}(\\.{_LABEL}){{0,3}}"
_LOCAL = "[A-Za-z0-9_%+-]+(\\.[A-Za-z0-9_%+-]+)*"
_DOMAIN = f"{_LABEL}(\\.{_LABEL})+"
_EMAIL = f"{_LOCAL}@{_DOMAIN}"
_PCHAR = "[A-Za-z0-9._~!$&'()*+,;=:@-]"
# RFC 3986: scheme ":" hier-part, where hier-part is "//" authority path-abempty (a host name,
# or an empty one before a non-empty path as in file:///x), path-absolute ("/" not followed by "/") or path-rootless
# (mailto:a@b, urn:isbn:..., did:example:...); path-empty is left out
_URI = (
    "[a-zA-Z][a-zA-Z0-9+.-]*:"
    f"(//({_LABEL}(\\.{_LABEL})*(:[0-9]{{1,5}})?(/{_PCHAR}*)*|(/{_PCHAR}*)+)"
    f"|/({_PCHAR}+(/{_PCHAR}*)*)?"
    f"|{_PCHAR}+(/{_PCHAR}*)*)"
    f"(\\?({_PCHAR}|[/?])*)?"
    f"(#({_PCHAR}|[/?])*)?"
)
_PCHAR_NC = "[A-Za-z0-9._~!$&'()*+,;=@-]"  # no ':' in the first segment of a relative path
_URI_REF = f"({_URI}|(/{_PCHAR}+|{_PCHAR_NC}+)(/{_PCHAR}*)*(\\?({_PCHAR}|[/?])*)?(#({_PCHAR}|[/?])*)?)"
_UUID = "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
# RFC 3339 appendix A: each unit may only be followed by the next smaller one
_DUR_T = "T([0-9]+H([0-9]+M([0-9]+S)?)?|[0-9]+M([0-9]+S)?|[0-9]+S)"
_DURATION = f"P(([0-9]+Y([0-9]+M([0-9]+D)?)?|[0-9]+M([0-9]+D)?|[0-9]+D)({_DUR_T})?|{_DUR_T}|[0-9]+W)"
_JSON_POINTER = "(/([A-Za-z0-9 ._:@$!*+,;=-]|~[01])*)*"
_REL_JSON_POINTER = f"(0|[1-9][0-9]*)(#|{_JSON_POINTER})"
# RFC 6570 URI Template, levels 1-4: literals (ucschar/iprivate only in the BMP), and
# expressions without the reserved operators "=,!@|" (which a template processor must refuse)
_UT_LITERAL = (
    "([!#$&-;=?-Z\\[\\]_a-z~\\u00a0-\\ud7ff\\ue000-\\ufdcf\\ufdf0-\\uffef]"
    "|%[0-9A-Fa-f]{2})"
)
_UT_VARCHAR = "([A-Za-z0-9_]|%[0-9A-Fa-f]{2})"
_UT_VARSPEC = f"{_UT_VARCHAR}(\\.?{_UT_VARCHAR})*(:[1-9][0-9]{{0,3}}|\\*)?"
_URI_TEMPLATE = f"({_UT_LITERAL}|\\{{[+#./;?&]?{_UT_VARSPEC}(,{_UT_VARSPEC})*\\}})*"


def _regex_subset(depth: int = 2) -> str:
    """A regular subset of ECMA-262 (unicode mode) regular expressions: literal characters,
    ``.``, simple classes (single characters and the ranges ``a-z``, ``A-Z``, ``0-9``), the
    quantifiers ``* + ? {n} {n,}`` (optionally lazy), ``^``/``$``, alternation, and groups
    nested at most ``depth`` deep.  No backslash and no quote, so the JSON text is the value."""
    lit = "[ !#%&',/0-9:;<=>@A-Z_`a-z~-]"
    cls_item = "([ !#$%&'()*+,./0-9:;<=>?@A-Z_`a-z{|}~]|a-z|A-Z|0-9)"
    cls = f"\\[\\^?{cls_item}+\\]"
    quant = "([*+?]|\\{[0-9]{1,3},?\\})\\??"
    atom = f"({lit}|\\.|{cls})"
    for _ in range(depth + 1):
        seq = f"([$^]|{atom}({quant})?)*"
        alts = f"{seq}(\\|{seq})*"
        atom = f"({lit}|\\.|{cls}|\\((\\?:)?{alts}\\))"
    return alts


FORMAT_PATTERNS: dict[str, str] = {
    "date": _DATE,
    "time": _TIME,
    "date-time": f"{_DATE}T{_TIME}",
    "email": _EMAIL,
    "idn-email": _EMAIL,
    "uuid": _UUID,
    "uri": _URI,
    "iri": _URI,
    "uri-reference": _URI_REF,
    "iri-reference": _URI_REF,
    "ipv4": _IPV4,
    "ipv6": _ipv6(),
    "hostname": _HOSTNAME,
    "idn-hostname": _HOSTNAME,
    "duration": _DURATION,
    "json-pointer": _JSON_POINTER,
    "relative-json-pointer": _REL_JSON_POINTER,
    "uri-template": _URI_TEMPLATE,
    "regex": _regex_subset(),
}

SUPPORTED_FORMATS = frozenset(FORMAT_PATTERNS)

# The format names that JSON Schema itself defines (draft-04 to 2020-12; the names are the same
# in 2019-09 and 2020-12, older drafts define subsets of them).  A fixed list on purpose: it must
# not depend on which optional packages give ``jsonschema`` its format checkers.  Any other name
# ("int32", "color", "phone", ...) is not defined by the specification, so validators treat it as
# an annotation and ignore it; a compiler that ignores it stays sound.  Draft-03 names
# ("color", "style", "phone", "utc-millisec", "host-name", "ip-address") are listed apart:
# draft-03 schemas are refused by the compiler, and later drafts do not define them.
SPEC_FORMATS = frozenset({
    "date-time", "date", "time", "duration",
    "email", "idn-email",
    "hostname", "idn-hostname",
    "ipv4", "ipv6",
    "uri", "uri-reference", "iri", "iri-reference", "uuid",
    "uri-template",
    "json-pointer", "relative-json-pointer",
    "regex",
})


def is_spec_format(name: str) -> bool:
    """Whether JSON Schema (draft-04 .. 2020-12) defines the format ``name``."""
    return name in SPEC_FORMATS


def format_pattern(name: str) -> Optional[str]:
    """Anchored ECMA pattern for a format, or None when the format is not supported."""
    p = FORMAT_PATTERNS.get(name)
    return None if p is None else "^" + p + "$"
