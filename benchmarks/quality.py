"""The quality workload: extraction prompts with known answers, for choosing how the prompt writes the schema.

WRITTEN 2026-12-05 to choose the schema hint's style (``full`` / ``compact`` / ``types``) and place
(``user`` / ``system``) on answer quality and wait, so that the held-out workload (``heldout.py``),
which no default may be chosen on, stays untouched: its figures check the choice afterwards.
``python benchmarks/bench.py --workload benchmarks/quality.py --schema-hint STYLE --schema-hint-place PLACE``.

12 extraction prompts over the schemas of ``schemas/`` (the tuned workload's; their prompts here are
new). Each states facts that fix some fields; ``expected`` maps JSON Pointers (RFC 6901) into the
answer to those values, and the bench scores field exact match beside validity and speed. Some facts
are stated in another form than the schema's (a month name for an ISO date, "a quarter of an hour"
for 15 minutes, "no" for false) so that the answer depends on reading the schema, not on copying.
"""

from __future__ import annotations

import sys
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # the sibling workload.py, wherever this runs from
    sys.path.append(str(Path(__file__).resolve().parent))

from workload import SCHEMA_DIR, Prompt  # noqa: E402
from workload import load_workload as _load_workload  # noqa: E402

WRITTEN = "2026-12-05"

PROMPTS: list[Prompt] = [
    Prompt("q-person-1", "person", "extraction",
           "From the staff directory: \"Tomasz Kowalczyk joined the finance team this spring. He is 52 and reads his "
           "mail at t.kowalczyk@ledgerly.pl.\" Give the person.",
           {"/name": "Tomasz Kowalczyk", "/age": 52, "/email": "t.kowalczyk@ledgerly.pl"}),
    Prompt("q-person-2", "person", "extraction",
           "Patient intake form, filled in by hand: name Ama Boateng; born 19 years ago this month; no email given.",
           {"/name": "Ama Boateng", "/age": 19}),
    Prompt("q-weather-1", "weather", "extraction",
           "Station log for Reykjavik at noon: snow falling, minus four degrees Celsius, relative humidity 87 percent.",
           {"/city": "Reykjavik", "/condition": "snowy", "/temperature_c": -4, "/humidity": 87, "/unit": "celsius"}),
    Prompt("q-weather-2", "weather", "extraction",
           "It's a grey, overcast afternoon in Lyon: 12.5 °C, humidity at 64%, no rain so far.",
           {"/city": "Lyon", "/condition": "cloudy", "/temperature_c": 12.5, "/humidity": 64}),
    Prompt("q-order-1", "order", "extraction",
           "Support ticket: \"My order ORD-204518 still hasn't shipped. It's for Lena Fischer, 7 Harbour Lane, "
           "Portsmouth, 02801.\"",
           {"/order_id": "ORD-204518", "/customer/name": "Lena Fischer", "/customer/address/street": "7 Harbour Lane",
            "/customer/address/city": "Portsmouth", "/customer/address/zip": "02801", "/status": "pending"}),
    Prompt("q-order-2", "order", "extraction",
           "Courier scan: parcel for order ORD-000731 handed to the recipient, Diego Ramírez, at 415 Calle Sol, "
           "Austin 73301, yesterday evening.",
           {"/order_id": "ORD-000731", "/customer/name": "Diego Ramírez", "/customer/address/street": "415 Calle Sol",
            "/customer/address/city": "Austin", "/customer/address/zip": "73301", "/status": "delivered"}),
    Prompt("q-event-1", "event", "extraction",
           "Calendar invite: \"Quarterly budget review\" on March 3rd, 2027, starting at 14:30, for an hour and a half, "
           "in Room 4B. Organizer: Priya Nair. Required: Tom Berg.",
           {"/title": "Quarterly budget review", "/date": "2027-03-03", "/duration_minutes": 90,
            "/location": "Room 4B", "/attendees/0/name": "Priya Nair", "/attendees/0/role": "organizer",
            "/attendees/1/name": "Tom Berg", "/attendees/1/role": "required"}),
    Prompt("q-event-2", "event", "extraction",
           "Quick sync \"Release go/no-go\" on 2026-12-18 at 09:00 for a quarter of an hour, online, no room. "
           "Hosted by Sam Okafor; Jun Park may join if free.",
           {"/title": "Release go/no-go", "/date": "2026-12-18", "/duration_minutes": 15,
            "/attendees/0/name": "Sam Okafor", "/attendees/0/role": "organizer", "/attendees/1/name": "Jun Park",
            "/attendees/1/role": "optional"}),
    Prompt("q-inventory-1", "inventory", "extraction",
           "Stock count at the Rotterdam warehouse: 120 units of KLM-4410 at 3.75 each, and 8 units of ZTR-0092 at "
           "1299 each.",
           {"/warehouse": "Rotterdam", "/items/0/sku": "KLM-4410", "/items/0/quantity": 120, "/items/0/price": 3.75,
            "/items/1/sku": "ZTR-0092", "/items/1/quantity": 8, "/items/1/price": 1299}),
    Prompt("q-review-1", "review", "extraction",
           "Review of the Aeron Lite desk chair: \"Comfortable for long days and easy to adjust, but the armrests "
           "creak. Three stars from me, and no, I wouldn't buy it again.\"",
           {"/product": "Aeron Lite desk chair", "/rating": 3, "/recommended": False}),
    Prompt("q-tool-1", "tool_call", "extraction",
           "Call a tool for this request: \"Search the web for the five best-rated ramen places in Osaka.\"",
           {"/name": "search_web", "/arguments/max_results": 5}),
    Prompt("q-tool-2", "tool_call", "extraction",
           "Call a tool for this request: \"What's the weather like in Nairobi right now?\"",
           {"/name": "get_weather"}),
]


def load_workload(n: int | None = None, schema_dir: str | Path | None = None) -> list[Prompt]:
    """The first ``n`` prompts (all by default) with their schemas loaded from ``schema_dir``."""
    return _load_workload(n, schema_dir or SCHEMA_DIR, PROMPTS)
