"""The llama-server peer of ``benchmarks.concurrency --peer llama-server`` against a fake server (a Python script
that speaks the two endpoints the peer uses): process start, readiness, the request body, the figures, shutdown."""

from __future__ import annotations

import json
import sys
import textwrap

from benchmarks.llama_server_peer import LlamaServer, run_clients

FAKE = textwrap.dedent('''\
    #!{python}
    import json, sys
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    args = sys.argv[1:]
    port = int(args[args.index("--port") + 1])
    log = open({log!r}, "a")

    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass
        def _send(self, obj):
            body = json.dumps(obj).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def do_GET(self):
            self._send({{"status": "ok"}})
        def do_POST(self):
            req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            log.write(json.dumps({{"argv": args, "req": req}}) + "\\n"); log.flush()
            text = '{{"a": 1}}' if req["prompt"][0] != 0 else "not json"
            self._send({{"content": text, "timings": {{"predicted_n": 4, "prompt_n": len(req["prompt"]), "prompt_ms": 250.0}}}})

    ThreadingHTTPServer(("127.0.0.1", port), H).serve_forever()
    ''')


def test_the_peer_sends_prompt_ids_with_json_schema_and_counts_what_comes_back(tmp_path):
    log = tmp_path / "requests.jsonl"
    binary = tmp_path / "llama-server"
    binary.write_text(FAKE.format(python=sys.executable, log=str(log)))
    binary.chmod(0o755)
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    server = LlamaServer("model.gguf", parallel=3, threads=2, ctx_per_slot=100, binary=binary)
    try:
        jobs = [("a", [5, 6, 7], schema), ("b", [8, 9], schema), ("bad", [0, 1], schema)]
        out = run_clients(server, jobs, clients=2, max_new_tokens=17)
        rss = server.peak_rss_mb()
    finally:
        server.close()
    assert server.proc.poll() is not None, "the server process is stopped"
    assert out["requests"] == 3 and out["errors"] == 0 and out["tokens"] == 12 and out["valid"] == 2
    assert out["p50_s"] is not None and out["p50_s"] <= out["p95_s"] and out["throughput_tok_s"] > 0
    assert rss > 0
    sent = [json.loads(line) for line in log.read_text().splitlines()]
    assert sorted(tuple(s["req"]["prompt"]) for s in sent) == [(0, 1), (5, 6, 7), (8, 9)]
    for s in sent:
        assert s["req"]["json_schema"] == schema and s["req"]["temperature"] == 0.0 and s["req"]["n_predict"] == 17
        argv = s["argv"]
        assert argv[argv.index("-np") + 1] == "3" and argv[argv.index("-c") + 1] == "300" and argv[argv.index("-m") + 1] == "model.gguf"
    by_id = {r["id"]: r for r in out["records"]}
    assert by_id["a"]["prompt_tokens"] == 3 and by_id["a"]["prefill_s"] == 0.25 and not by_id["bad"]["valid"]
