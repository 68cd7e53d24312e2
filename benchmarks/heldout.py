"""The held-out benchmark workload of ``python benchmarks/bench.py --workload heldout``.

WRITTEN 2026-12-01, BEFORE ANY TUNING ON IT. NEVER TUNE ON IT: no default (draft length,
proposers, schema hint, draft window, thresholds) may be chosen by its figures. It exists to check
that what was tuned on ``benchmarks/workload.py`` carries over to prompts and schemas nobody tuned
for. Changing a prompt, a schema or an expected value after figures were measured on it defeats
its purpose: add a new workload instead.

13 prompts over 10 schemas in ``schemas/heldout/``, none of which the tuned workload uses:

=================== =====================================================================
schema              shape
=================== =====================================================================
k8s_deployment      large nested object (a Kubernetes Deployment subset), consts, patterns
invoice             nested object with an array of line items, dates, enum, numbers
tool_choice         a function call choosing among 7 tools (anyOf of objects with const names)
meeting_summary     long free text (summary up to 600 characters), arrays of strings/objects
yes_no              short answer: one enum
single_integer      short answer: a bare integer (not an object)
date_answer         short answer: a bare date string
bug_report          nested object, enums, anyOf with null, array of steps, email pattern
recipe              array of objects with an enum unit, bounded numbers (generative)
product_description long free text (description up to 600 characters) (generative)
=================== =====================================================================

Extraction prompts state facts; ``expected`` maps JSON Pointers (RFC 6901) into the answer to
the values those facts fix, so the bench can score answer quality (field exact match) beside
speed. Only fields the prompt determines are listed; free text is not.
"""

from __future__ import annotations

import sys
from pathlib import Path

if str(Path(__file__).resolve().parent) not in sys.path:  # the sibling workload.py, wherever this runs from
    sys.path.append(str(Path(__file__).resolve().parent))

from workload import Prompt  # noqa: E402
from workload import load_workload as _load_workload  # noqa: E402

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "schemas" / "heldout"
WRITTEN = "2026-12-01"

PROMPTS: list[Prompt] = [
    Prompt("k8s-extract", "k8s_deployment", "extraction",
           "Write the Deployment manifest for this request from the platform team: \"Deploy the service "
           "checkout-api into the namespace payments with 4 replicas. Label it app checkout-api, tier "
           "backend. It runs one container named api from the image registry.example.com/checkout-api:2.7.1, "
           "listening on port 8443, limited to 500m CPU and 768Mi of memory.\"",
           {"/apiVersion": "apps/v1", "/kind": "Deployment", "/metadata/name": "checkout-api",
            "/metadata/namespace": "payments", "/metadata/labels/app": "checkout-api",
            "/metadata/labels/tier": "backend", "/spec/replicas": 4, "/spec/selector/matchLabels/app": "checkout-api",
            "/spec/template/spec/containers/0/name": "api",
            "/spec/template/spec/containers/0/image": "registry.example.com/checkout-api:2.7.1",
            "/spec/template/spec/containers/0/containerPort": 8443,
            "/spec/template/spec/containers/0/resources/cpu": "500m",
            "/spec/template/spec/containers/0/resources/memory": "768Mi"}),
    Prompt("yes_no-no", "yes_no", "extraction",
           "Answer yes or no. Lease clause 14: \"The tenant shall not keep any animals, including cats, dogs "
           "and birds, on the premises without the landlord's prior written consent, which the landlord "
           "has declined for this unit.\" Question: may the tenant keep a cat in this unit?",
           {"/answer": "no"}),
    Prompt("invoice-extract", "invoice", "extraction",
           "Turn this invoice into a record: \"Invoice INV-20931, issued 2026-10-05, payable by 2026-11-04, "
           "amounts in EUR. Bill to: Halvorsen Maritime AS, VAT ID NO987654321. Items: 3 x Hull inspection "
           "at 1250.00 each; 12 x Anti-fouling coating litre at 48.50 each; 1 x Survey report at 390.00. "
           "Total due: 4722.00.\"",
           {"/invoice_number": "INV-20931", "/issue_date": "2026-10-05", "/due_date": "2026-11-04",
            "/currency": "EUR", "/customer/name": "Halvorsen Maritime AS", "/customer/vat_id": "NO987654321",
            "/line_items/0/quantity": 3, "/line_items/0/unit_price": 1250.0, "/line_items/1/quantity": 12,
            "/line_items/1/unit_price": 48.5, "/line_items/2/quantity": 1, "/line_items/2/unit_price": 390.0,
            "/total": 4722.0}),
    Prompt("tools-flight", "tool_choice", "extraction",
           "You can call one of these tools: get_weather, search_flights, book_restaurant, send_email, "
           "create_reminder, convert_currency, get_stock_price. Produce the call for this request: \"find "
           "me flights from Lisbon (LIS) to Helsinki (HEL) on 2027-02-18 for 2 passengers\".",
           {"/name": "search_flights", "/arguments/origin": "LIS", "/arguments/destination": "HEL",
            "/arguments/date": "2027-02-18", "/arguments/passengers": 2}),
    Prompt("summary-extract", "meeting_summary", "extraction",
           "Summarize these meeting notes. Notes: \"Storage migration sync, 2026-11-20. Attendees: Ingrid "
           "Sorensen, Kwame Mensah, Yuki Tanaka. We reviewed the move of the photo archive from the old "
           "NFS cluster to object storage. Copy throughput is 40 percent below plan because of small files; "
           "Kwame proposed bundling files into 64 MB packs before upload, and the group agreed. The cut-over "
           "date moves from December 1 to December 15. Yuki raised that the thumbnail service still reads "
           "paths directly from NFS and must be switched to signed URLs first. Action items: Kwame Mensah "
           "implements the packing job by 2026-11-27; Yuki Tanaka switches the thumbnail service to signed "
           "URLs by 2026-12-05; Ingrid Sorensen announces the new cut-over date to customers by "
           "2026-11-24.\"",
           {"/action_items/0/owner": "Kwame Mensah", "/action_items/0/due": "2026-11-27",
            "/action_items/1/owner": "Yuki Tanaka", "/action_items/1/due": "2026-12-05",
            "/action_items/2/owner": "Ingrid Sorensen", "/action_items/2/due": "2026-11-24"}),
    Prompt("integer-extract", "single_integer", "extraction",
           "How many seats does the venue have in total? Answer with the number only. Facts: \"The Lindqvist "
           "Hall has 1240 seats on the ground floor, 380 in the first balcony and 96 in the boxes.\"",
           {"": 1716}),
    Prompt("recipe-generate", "recipe", "generative",
           "Invent a simple vegetarian weeknight dinner recipe for two people."),
    Prompt("date-extract", "date_answer", "extraction",
           "On which date is the application deadline? Answer with the date only. Notice: \"Applications "
           "for the 2027 residency programme open on 10 January 2027 and close on 3 March 2027; interviews "
           "follow in April.\"",
           {"": "2027-03-03"}),
    Prompt("bug-extract", "bug_report", "extraction",
           "File this support message as a bug report with id BUG-4172: \"Hi, this is Rosa Delgado "
           "(rosa.delgado@fernhill.org). Since updating the Android app to 5.12.0 on my phone, logging in "
           "with two-factor codes fails every time: I open the app, enter my email and password, type the "
           "six-digit code from SMS, and it says 'invalid code'. Nobody on our team can log in on mobile, "
           "so please treat it as critical. This is in the auth part of the mobile app, no browser "
           "involved.\"",
           {"/id": "BUG-4172", "/severity": "critical", "/component": "auth", "/environment/os": "android",
            "/environment/app_version": "5.12.0", "/environment/browser": None, "/reporter/name": "Rosa Delgado",
            "/reporter/email": "rosa.delgado@fernhill.org"}),
    Prompt("tools-restaurant", "tool_choice", "extraction",
           "You can call one of these tools: get_weather, search_flights, book_restaurant, send_email, "
           "create_reminder, convert_currency, get_stock_price. Produce the call for this request: \"book "
           "a table at Osteria Bellavista for 6 people on 2026-12-12 at 19:30\".",
           {"/name": "book_restaurant", "/arguments/restaurant": "Osteria Bellavista", "/arguments/party_size": 6,
            "/arguments/date": "2026-12-12", "/arguments/time": "19:30"}),
    Prompt("product-generate", "product_description", "generative",
           "Write the product page copy for a fictional solar-powered camping lantern called the Lumio Trek."),
    Prompt("k8s-generate", "k8s_deployment", "generative",
           "Write a Deployment manifest for a small Redis cache used by a web shop's session store."),
    Prompt("yes_no-yes", "yes_no", "extraction",
           "Answer yes or no. Warranty terms: \"Batteries are covered for 24 months from the date of purchase "
           "against loss of capacity below 70 percent.\" The customer bought the battery 15 months ago and it "
           "now holds 55 percent of its capacity. Question: is the battery covered by the warranty?",
           {"/answer": "yes"}),
]


def load_workload(n: int | None = None, schema_dir: str | Path | None = None) -> list[Prompt]:
    """The first ``n`` prompts (all by default) with their schemas loaded from ``schema_dir``."""
    return _load_workload(n, schema_dir or SCHEMA_DIR, PROMPTS)
