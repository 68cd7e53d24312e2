"""Keep rates and what they are worth: the two small pieces the draft-length rule and the lookup
gate share.

A keep rate is how often proposed tokens are kept by the verify, held as counts that fade (so the
rate follows the text) plus a prior worth a few tokens (so a new source starts somewhere sensible
and one bad stretch does not shut it out for good). A block whose positions are kept with
conditional rates ``a_1, a_2, ...`` gives ``1 + a_1 + a_1 a_2 + ...`` tokens per verify: the kept
prefix plus the token every verify adds.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RunningRate", "expected_tokens"]


@dataclass
class RunningRate:
    """A keep rate as faded counts with a prior worth ``weight`` judged tokens."""

    prior: float
    weight: float = 2.0
    kept: float = 0.0
    judged: float = 0.0

    @property
    def value(self) -> float:
        """The estimated keep rate."""
        return (self.kept + self.weight * self.prior) / (self.judged + self.weight)

    def observe(self, kept: float, judged: float) -> None:
        """Add ``judged`` proposals, ``kept`` of them kept."""
        self.kept += kept
        self.judged += judged

    def fade(self, decay: float) -> None:
        """Every count keeps a share ``decay``."""
        self.kept *= decay
        self.judged *= decay


def expected_tokens(rates: list[float]) -> float:
    """Tokens a verify gives for a block whose positions are kept with these conditional rates:
    the kept prefix plus the one token every verify adds."""
    total, run = 1.0, 1.0
    for rate in rates:
        run *= rate
        total += run
    return total
