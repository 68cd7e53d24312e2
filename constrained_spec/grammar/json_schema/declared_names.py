"""The declared mode's names in a ``oneOf``: where an object gets only the names its schema declares
(``additional_properties="declared"``, the default, without ``additionalProperties`` or
``patternProperties``), an object of branch i never has a name that neither branch i nor the
``oneOf``'s context declares. Branch j's requirement of such a name, or j's constraints on it, then
never meet branch i's objects, and the presence split (:meth:`~.combinators.Combinators._presence_halves`)
counts the name as absent.

That is a claim about the final object, whose names are known only where it is written (later
branch groups, negations of other branches and the leaf's ``not`` may add names), so it travels
with the branch as an :class:`~.ir.Unseen` action and :func:`check_unseen` checks it there. Where it
fails, :class:`UnseenClaimFailed` makes the compiler tell that ``oneOf`` apart once more without
the claim (:meth:`~.compiler.Compiler.flat_parts`): the answer is the one the claim-free round gives.
"""
from __future__ import annotations

from typing import Optional

from constrained_spec.errors import UnsupportedKeywordError
from constrained_spec.grammar.json_schema.ir import Flat


class UnseenClaimFailed(UnsupportedKeywordError):
    """An object of a ``oneOf`` branch declares a name the split took as never declared."""

    def __init__(self, pointer: str, names: frozenset[str]) -> None:
        super().__init__("oneOf", pointer, "a branch's objects declare a name its branches were told apart "
                         f"on as undeclared ({', '.join(sorted(names))})")


def has_extras(flat: Flat) -> bool:
    """Whether an owner of flat writes names beyond the declared ones (``patternProperties`` or an
    ``additionalProperties`` that is there)."""
    return any(o.patterns or o.ap is not None for o in flat.owners)


def context_names(rest: Flat, declared_mode: bool) -> Optional[frozenset[str]]:
    """The names the ``oneOf``'s context (``rest``, the flat without the group) declares, where the
    declared mode lets a branch count on names outside them and its own being absent; None where it
    does not (the spec mode, or the context writes extra names)."""
    if not declared_mode or has_extras(rest):
        return None
    return frozenset(rest.props) | frozenset(rest.required)


def never_declared(fi: Flat, context: Optional[frozenset[str]], name: str) -> bool:
    """Whether branch i's objects (fi, in a context that declares ``context``) are taken never to
    have ``name``: neither declares it, neither writes extra names, and the two declare some name
    (an object that declares none is free-form and may have any)."""
    if context is None or has_extras(fi):
        return False
    if name in fi.props or name in fi.required or name in context:
        return False
    return bool(fi.props or fi.required or context)


def check_unseen_constants(flat: Flat) -> None:
    """Raise :class:`UnseenClaimFailed` where flat's ``enum``/``const`` (written as given, not through
    the object emitter) holds an object with a name one of its ``oneOf`` branches was told apart on
    as never declared."""
    for claim in flat.unseen:
        if any(isinstance(v, dict) and claim.names & set(v) for v in flat.enum or []):
            raise UnseenClaimFailed(claim.ptr, claim.names)


def check_unseen(flat: Flat, names: list[str], declared_mode: bool) -> None:
    """Raise :class:`UnseenClaimFailed` where the object about to be written (flat, with its
    declared ``names``) may have a name one of its ``oneOf`` branches was told apart on as never
    declared."""
    for claim in flat.unseen:
        if not declared_mode or not names or has_extras(flat) or claim.names & set(names):
            raise UnseenClaimFailed(claim.ptr, claim.names)
