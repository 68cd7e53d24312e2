"""``alignment`` and ``particles`` request fields on the server (tiny models, FastAPI's TestClient)."""

from __future__ import annotations

import json

import pytest
from grammar_oracles import in_language

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from constrained_spec.serving.app import ServerConfig, create_app  # noqa: E402

YES_NO = 'start: "yes" | "no" | "yes please"\n'
USER = [{"role": "user", "content": "Answer."}]


@pytest.fixture(scope="module")
def client(tiny_generator):
    with TestClient(create_app(tiny_generator(max_new_tokens=16, num_draft_tokens=3), ServerConfig(model_name="tiny"))) as c:
        yield c


def post(client, **body):
    body.setdefault("messages", USER)
    body.setdefault("seed", 1)
    body.setdefault("temperature", 1.0)
    return client.post("/v1/chat/completions", json=body)


def test_smc_request_returns_text_in_the_language(client):
    r = post(client, guided_grammar=YES_NO, alignment="smc", particles=3)
    assert r.status_code == 200, r.text
    assert in_language(YES_NO, r.json()["choices"][0]["message"]["content"])


def test_smc_stream_carries_the_sample(client):
    with client.stream("POST", "/v1/chat/completions", json={"messages": USER, "seed": 2, "temperature": 1.0, "stream": True,
                                                             "guided_grammar": YES_NO, "alignment": "smc", "particles": 2}) as r:
        assert r.status_code == 200
        chunks = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert in_language(YES_NO, text)


@pytest.mark.parametrize("body", [
    dict(alignment="smc", temperature=0.0), dict(alignment="smc", particles=0),
    dict(alignment="global"), dict(alignment="smc", particles=10_000),
])
def test_smc_request_errors_are_400(client, body):
    r = post(client, guided_grammar=YES_NO, **body)
    assert r.status_code == 400, r.text
    assert "Traceback" not in r.text


def test_smc_request_on_a_batched_server_runs_its_particles_as_rows(tiny_generator):
    """With continuous batching, an SMC request's particles are batch rows (its forwards carry
    several rows) beside a plain request decoding at the same time; both answers are in the language."""
    import threading

    gen = tiny_generator(max_new_tokens=16, num_draft_tokens=3, max_batch_size=4)
    with TestClient(create_app(gen, ServerConfig(model_name="tiny"))) as c:
        plain: dict = {}
        other = threading.Thread(target=lambda: plain.setdefault("r", post(c, guided_grammar=YES_NO, seed=5)))
        other.start()
        r = post(c, guided_grammar=YES_NO, alignment="smc", particles=3)
        other.join(60)
    assert r.status_code == 200 and plain["r"].status_code == 200, (r.text, plain["r"].text)
    for response in (r, plain["r"]):
        assert in_language(YES_NO, response.json()["choices"][0]["message"]["content"])
    assert max(gen.batch.metrics.rows_per_forward) >= 3  # the plain request alone is one row


@pytest.mark.parametrize("alignment", ["local", "smc"])
def test_a_budget_run_out_reports_its_tokens_and_stats(client, alignment):
    """``max_tokens`` runs out before ``[ab]{200}`` is complete: finish reason ``length``, the
    partial text, usage counting the tokens generated (SMC: the longest particle's, whose text is
    returned; it said 0 before) and the decoding stats (``null`` before)."""
    import re

    smc = {"alignment": "smc", "particles": 3} if alignment == "smc" else {}
    r = post(client, guided_regex="[ab]{200}", max_tokens=5, **smc)
    assert r.status_code == 200, r.text
    body = r.json()
    content = body["choices"][0]["message"]["content"]
    assert body["choices"][0]["finish_reason"] == "length" and re.fullmatch("[ab]{1,199}", content)
    assert 1 <= body["usage"]["completion_tokens"] <= 5
    assert body["usage"]["total_tokens"] == body["usage"]["prompt_tokens"] + body["usage"]["completion_tokens"]
    stats = body["constrained_spec"]["stats"]
    assert stats is not None and stats["stop_reason"] == "max_new_tokens" and stats["target_forwards"] >= 1
