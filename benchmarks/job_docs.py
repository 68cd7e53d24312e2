"""The job workload of ``python benchmarks/job.py``: 20 support e-mails, one schema, known answers.

WRITTEN 2026-12-05, BEFORE ANY RUN ON IT. NEVER TUNE ON IT: no default may be chosen by its figures
(it measures a job of many documents against llama-server and against one CLI call per document).

One schema, ``schemas/job/support_ticket.json`` (a ticket: id pattern, enums, a boolean, a short free
summary). Each e-mail states the facts that fix the id, the customer, the product, the category, the
priority and whether a refund is asked for; ``expected`` maps JSON Pointers into the answer to those
values (the summary is free text and is not scored).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # the sibling workload.py, wherever this runs from
    sys.path.append(str(Path(__file__).resolve().parent))

from workload import Prompt  # noqa: E402

WRITTEN = "2026-12-05"
SCHEMA_PATH = Path(__file__).resolve().parents[1] / "schemas" / "job" / "support_ticket.json"
INSTRUCTION = "Turn this support e-mail into a ticket."


def _ticket(tid: str, customer: str, product: str, category: str, priority: str, refund: bool) -> dict[str, object]:
    return {"/ticket_id": tid, "/customer": customer, "/product": product, "/category": category,
            "/priority": priority, "/refund_requested": refund}


EMAILS: list[tuple[str, str, dict[str, object]]] = [
    ("job-01", "Ticket TCK-10482. Hi, this is Marta Lindqvist. My router drops the Wi-Fi every evening around nine and "
     "the whole family loses the connection. Not the end of the world, but please look at it this week. Medium priority.",
     _ticket("TCK-10482", "Marta Lindqvist", "router", "bug", "medium", False)),
    ("job-02", "Re: TCK-20917. I was charged twice for the thermostat subscription in November. Please refund the second "
     "charge. This is urgent, my card is nearly maxed out. - Kwame Asante",
     _ticket("TCK-20917", "Kwame Asante", "thermostat", "billing", "urgent", True)),
    ("job-03", "Hello team, Yuki Tanaka here (ticket TCK-33051). Could the app show the camera feed in landscape mode? "
     "Just an idea for a future version, low priority.",
     _ticket("TCK-33051", "Yuki Tanaka", "app", "feature_request", "low", False)),
    ("job-04", "TCK-40126: My doorbell was supposed to arrive on Monday and the parcel is still stuck in the depot. "
     "High priority please, we are away next week. Regards, Oliver Brandt",
     _ticket("TCK-40126", "Oliver Brandt", "doorbell", "shipping", "high", False)),
    ("job-05", "I cannot log in to my account since I changed my e-mail address; the password reset link never comes. "
     "My smart plug schedules are stuck. Ticket TCK-51873, Fatima Zahra Benali. Medium priority.",
     _ticket("TCK-51873", "Fatima Zahra Benali", "smart_plug", "account", "medium", False)),
    ("job-06", "From: Diego Morales. Ticket TCK-60244. The camera I bought stopped recording after the latest firmware "
     "update. It is my shop's only security camera, so this is urgent. If it can't be fixed I want my money back.",
     _ticket("TCK-60244", "Diego Morales", "camera", "bug", "urgent", True)),
    ("job-07", "Ticket TCK-71590. Hi, Anna Kowalski writing. I was billed for a second thermostat that I never ordered. "
     "Please refund it. No rush, low priority.",
     _ticket("TCK-71590", "Anna Kowalski", "thermostat", "billing", "low", True)),
    ("job-08", "TCK-82035 - Samuel Okoro. Would love it if the router could schedule a guest network that switches "
     "off at midnight. Medium priority feature idea.",
     _ticket("TCK-82035", "Samuel Okoro", "router", "feature_request", "medium", False)),
    ("job-09", "Hi, my name is Ingrid Solberg and my ticket is TCK-90318. The doorbell chime plays twice for every press "
     "and wakes the baby. High priority for us. I don't need a refund, just a fix.",
     _ticket("TCK-90318", "Ingrid Solberg", "doorbell", "bug", "high", False)),
    ("job-10", "Ticket TCK-11764. The smart plug I ordered three weeks ago was never delivered; tracking says returned "
     "to sender. Please send it again or refund me. High priority. - Rahul Mehta",
     _ticket("TCK-11764", "Rahul Mehta", "smart_plug", "shipping", "high", True)),
    ("job-11", "Good morning. Chloé Dubois, ticket TCK-12085. I want to close my account and delete my data from the "
     "app. Low priority, whenever you can.",
     _ticket("TCK-12085", "Chloé Dubois", "app", "account", "low", False)),
    ("job-12", "TCK-13402. Our office camera shows a green screen at night instead of infrared video. Urgent: we had a "
     "break-in attempt. Signed, Tomás Herrera.",
     _ticket("TCK-13402", "Tomás Herrera", "camera", "bug", "urgent", False)),
    ("job-13", "Ticket TCK-14779, from Grace O'Neill. The thermostat arrived with a cracked screen in a crushed box. "
     "Please refund the order, I'll buy elsewhere. Medium priority.",
     _ticket("TCK-14779", "Grace O'Neill", "thermostat", "shipping", "medium", True)),
    ("job-14", "Hey, Lars Eriksen here, ticket TCK-15930. Could the doorbell app let two phones get the ring at the "
     "same time? Low priority, just a wish.",
     _ticket("TCK-15930", "Lars Eriksen", "doorbell", "feature_request", "low", False)),
    ("job-15", "TCK-16208: I am charged in dollars although my router plan is in euros. Please correct the billing "
     "currency and refund the conversion fees. Medium priority. Thanks, Sofia Rossi",
     _ticket("TCK-16208", "Sofia Rossi", "router", "billing", "medium", True)),
    ("job-16", "Ticket TCK-17551. My account got locked after too many attempts and the unlock code goes to my old "
     "phone number. I need the camera feed for work, so high priority. - Aisha Bello",
     _ticket("TCK-17551", "Aisha Bello", "camera", "account", "high", False)),
    ("job-17", "Hello, Jan Novak (ticket TCK-18896). The smart plug turns itself off at random times, about twice a day. "
     "Medium priority.",
     _ticket("TCK-18896", "Jan Novak", "smart_plug", "bug", "medium", False)),
    ("job-18", "TCK-19023. The app crashes as soon as I open the thermostat screen on my tablet. Urgent, the heating "
     "is stuck at 16 degrees. Mei Chen",
     _ticket("TCK-19023", "Mei Chen", "app", "bug", "urgent", False)),
    ("job-19", "Ticket TCK-20450 from Peter Schmidt. I returned the doorbell a month ago and still have no refund. "
     "Please refund it now. High priority.",
     _ticket("TCK-20450", "Peter Schmidt", "doorbell", "billing", "high", True)),
    ("job-20", "Hi, it's Amara Nwosu, ticket TCK-21677. Please add a dark mode to the app. Low priority.",
     _ticket("TCK-21677", "Amara Nwosu", "app", "feature_request", "low", False)),
]


def schema() -> dict[str, object]:
    """The job's one schema."""
    return dict(json.loads(SCHEMA_PATH.read_text()))


def load_workload(n: int | None = None) -> list[Prompt]:
    """The first ``n`` (default all 20) e-mails as prompts (instruction, then the e-mail in quotes)."""
    sch = schema()
    return [Prompt(ident, "support_ticket", "extraction", f"{INSTRUCTION} E-mail: \"{text}\"", expected, sch)
            for ident, text, expected in EMAILS[:n]]
