"""The fixed benchmark workload of ``python benchmarks/bench.py``: prompts over the example schemas.

Each entry names a schema file in ``schemas/`` and a prompt. "extraction" prompts hold the values
the answer must repeat (names, ids, numbers, dates), so prompt n-gram lookup has something to
find; "generative" prompts make the model invent the values. The list is ordered so that any
prefix (``--prompts N``, ``--quick`` takes 2) mixes both kinds and several schema shapes:

========== ======================================================================
schema     shape
========== ======================================================================
person     flat object, bounded integer, pattern-constrained string (email)
weather    enums, bounded numbers, const
order      nested objects, patterns, enum
inventory  array of objects, bounded integers and numbers, pattern
review     long strings (summary up to 400 characters), array of strings, boolean
event      array of objects with an enum, date/time formats, anyOf with null
tool_call  enum plus a nested object (function calling)
========== ======================================================================

:class:`Prompt` and :func:`load_workload` serve the held-out workload (``heldout.py``) too.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas"


@dataclass(frozen=True)
class Prompt:
    """One workload entry; ``schema`` is filled in by :func:`load_workload`. ``expected``: JSON
    Pointers into the answer -> the values the prompt's facts fix (none in this workload)."""

    id: str
    schema_name: str
    kind: str  # "extraction" or "generative"
    prompt: str
    expected: dict[str, Any] = field(default_factory=dict, compare=False)
    schema: Any = field(default=None, compare=False)


PROMPTS: list[Prompt] = [
    Prompt("person-extract", "person", "extraction",
           "Extract the person described in this note. Note: \"Our new hire, Margarethe Oyelaran, is 34 "
           "years old. Reach her at margarethe.oyelaran@northwind.io for onboarding questions.\""),
    Prompt("weather-generate", "weather", "generative",
           "Invent a plausible weather report for a coastal city on an autumn afternoon."),
    Prompt("order-extract", "order", "extraction",
           "Turn this shipping confirmation into an order record: \"Order ORD-482913 for Bartholomew "
           "Quigley has been shipped. Delivery address: 1742 Evergreen Terrace Apt 5, Springfield, 49007.\""),
    Prompt("inventory-extract", "inventory", "extraction",
           "Record this stock count. Warehouse \"Rotterdam North\": SKU KLM-2045 has 340 units at 12.75 "
           "each; SKU QRS-9081 has 18 units at 249.99 each; SKU TUV-3310 has 1200 units at 0.85 each."),
    Prompt("review-generate", "review", "generative",
           "Write a product review of a fictional pair of noise-cancelling headphones called the Zephyr X2."),
    Prompt("event-extract", "event", "extraction",
           "Create the calendar event from this email: \"Hi all, the Q3 roadmap review is on 2026-09-14 at "
           "14:30 for 90 minutes in Conference Room Aurora. Priya Raman organizes it; Tomasz Wojcik and "
           "Lena Fischer are required, Mateo Alvarez is optional.\""),
    Prompt("tool_call-extract", "tool_call", "extraction",
           "Produce the tool call for this user request: \"search the web for the best hiking trails near "
           "Lake Tahoe with dog-friendly campsites, and give me at most 7 results\"."),
    Prompt("weather-extract", "weather", "extraction",
           "Structure this bulletin: \"In Reykjavik it is windy today, with a temperature of -3.5 degrees "
           "Celsius and 81 percent humidity.\""),
    Prompt("review-extract", "review", "extraction",
           "Convert this customer review into a structured review. Product: \"Acme QuietBrew 12-cup coffee "
           "maker\". Review: \"I have used the QuietBrew every morning for three months. It is genuinely "
           "quiet, the carafe keeps coffee hot for two hours, and the programmable timer works reliably. "
           "The water tank is hard to fill under low cabinets and the manual is confusing. Four stars; I "
           "would recommend it.\""),
    Prompt("person-generate", "person", "generative",
           "Create a fictional profile of a retired astronaut."),
    Prompt("event-generate", "event", "generative",
           "Plan a one-day team offsite for four engineers next spring."),
    Prompt("inventory-generate", "inventory", "generative",
           "Make up a small inventory for a bicycle shop warehouse with three items."),
]


def load_workload(n: int | None = None, schema_dir: str | Path | None = None,
                  prompts: list[Prompt] | None = None) -> list[Prompt]:
    """The first ``n`` of ``prompts`` (default: this workload's, all of them) with their schemas
    loaded from ``schema_dir`` (default: ``schemas/``)."""
    folder = Path(schema_dir) if schema_dir else SCHEMA_DIR
    source = PROMPTS if prompts is None else prompts
    chosen = source if n is None else source[: max(0, n)]
    return [dataclasses.replace(p, expected=dict(p.expected), schema=json.loads((folder / f"{p.schema_name}.json").read_text()))
            for p in chosen]
