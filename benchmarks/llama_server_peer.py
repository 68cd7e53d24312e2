"""llama.cpp's own server (`llama-server`) as a benchmark peer: started on the same GGUF, sent the same prompt token
ids with its ``json_schema`` (llama.cpp's grammar), greedy, from concurrent clients.

The binary is the one ``scripts/build_llama_server.sh`` builds from the binding's own llama.cpp source (the same
patch and CMake flags); ``binary_path()`` asks that script where it is. Requests go to ``/completion`` over plain
HTTP (urllib): ``prompt`` as token ids, ``n_predict``, ``temperature`` 0, ``cache_prompt`` as asked. Peak RSS is
the server process's ``VmHWM``.
"""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Sequence

ROOT = Path(__file__).resolve().parents[1]
BUILD = ROOT / "scripts" / "build_llama_server.sh"


def binary_path() -> Path:
    """Where ``scripts/build_llama_server.sh`` puts (or would put) llama-server; it builds nothing here."""
    out = subprocess.run([str(BUILD), "--path"], check=True, capture_output=True, text=True)
    return Path(out.stdout.strip().splitlines()[-1])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def vmhwm_mb(pid: int | str = "self") -> float:
    """Peak RSS in MB of process ``pid`` (``VmHWM``; "self": this one); NaN where unreadable."""
    try:
        with open(f"/proc/{pid}/status") as fh:
            for line in fh:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


class LlamaServer:
    """A llama-server process on ``gguf`` with ``parallel`` slots of ``ctx_per_slot`` tokens each."""

    def __init__(self, gguf: str, parallel: int, threads: int, ctx_per_slot: int = 2048, binary: Path | None = None,
                 log: Path | None = None) -> None:
        self.binary = binary or binary_path()
        if not self.binary.is_file():
            raise SystemExit(f"llama-server is not built ({self.binary}): run scripts/build_llama_server.sh")
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [str(self.binary), "-m", gguf, "--host", "127.0.0.1", "--port", str(self.port), "-np", str(parallel),
               "-c", str(parallel * ctx_per_slot), "-t", str(threads), "-tb", str(threads), "--no-webui"]
        self.command = cmd
        self._log = open(log, "w") if log else subprocess.DEVNULL  # noqa: SIM115 - closed in close()
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=self._log)
        self._wait_ready(timeout=300)
        self.load_s = time.perf_counter() - t0

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"llama-server exited with {self.proc.returncode} (command: {' '.join(self.command)})")
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=5) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.5)
        raise RuntimeError("llama-server did not become ready")

    def complete(self, prompt_ids: list[int], schema: Any, max_new_tokens: int, cache_prompt: bool = True) -> dict[str, Any]:
        """One greedy ``/completion`` with ``json_schema``: text, tokens, its own timings."""
        body = json.dumps({"prompt": prompt_ids, "n_predict": max_new_tokens, "temperature": 0.0, "top_k": 1,
                           "json_schema": schema, "cache_prompt": cache_prompt, "stream": False}).encode()
        req = urllib.request.Request(self.url + "/completion", data=body, headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=3600) as r:
            out = json.loads(r.read())
        timings = out.get("timings", {})
        return {"text": out.get("content", ""), "tokens": int(timings.get("predicted_n", out.get("tokens_predicted", 0))),
                "prefill_s": float(timings.get("prompt_ms", 0.0)) / 1000, "prompt_tokens": int(timings.get("prompt_n", 0))}

    def peak_rss_mb(self) -> float:
        return vmhwm_mb(self.proc.pid)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not subprocess.DEVNULL:
            self._log.close()  # type: ignore[union-attr]


def run_clients(server: LlamaServer, jobs: Sequence[tuple[str, list[int], Any]], clients: int, max_new_tokens: int,
                cache_prompt: bool = True) -> dict[str, Any]:
    """``clients`` threads sending ``jobs`` (id, prompt ids, schema) as ``benchmarks.concurrency.run_clients`` does:
    client i sends jobs i, i+clients, ...; aggregate tok/s, p50/p95 latency, validity and per-request records."""
    import jsonschema

    from benchmarks.concurrency import percentile

    records: list[dict[str, Any]] = []
    lock = threading.Lock()

    def client(i: int) -> None:
        for job_id, ids, schema in jobs[i::clients]:
            t0 = time.perf_counter()
            try:
                r = server.complete(ids, schema, max_new_tokens, cache_prompt)
                try:
                    jsonschema.validate(json.loads(r["text"]), schema)
                    valid = True
                except Exception:  # noqa: BLE001 - an invalid answer is a figure too
                    valid = False
                rec = {"id": job_id, "ok": True, "valid": valid, **r}
            except Exception as exc:  # noqa: BLE001
                rec = {"id": job_id, "ok": False, "tokens": 0, "error": f"{type(exc).__name__}: {exc}"[:300]}
            rec["latency_s"] = time.perf_counter() - t0
            with lock:
                records.append(rec)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    lat = sorted(r["latency_s"] for r in records)
    tokens = sum(r["tokens"] for r in records)
    return {"clients": clients, "requests": len(records), "errors": sum(not r["ok"] for r in records), "wall_s": wall,
            "tokens": tokens, "throughput_tok_s": tokens / wall if wall else None, "p50_s": percentile(lat, 0.5) if lat else None,
            "p95_s": percentile(lat, 0.95), "valid": sum(bool(r.get("valid")) for r in records), "records": records}

