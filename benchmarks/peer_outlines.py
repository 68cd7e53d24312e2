"""The peer runner: `outlines` (transformers backend, outlines-core engine) behind a JSON-lines pipe.

Run by ``benchmarks/bench.py`` in a subprocess, with the interpreter of a separate virtual
environment that has ``outlines`` installed (see benchmarks/README.md), so that outlines and its
pins never touch this project's environment:

    /work/.venv-peer/bin/python benchmarks/peer_outlines.py --model /path/to/converted/target [--threads 2] [--dtype fp32]

It loads the target model folder (safetensors, offline), warms it up, prints one ``{"ready": ...}``
line, then answers one JSON line per request line on stdin:

* ``{"op": "compile", "key": K, "schema": {...}}`` - build outlines' generator for a JSON Schema
  (its outlines-core ``Index`` over the whole vocabulary: the peer's compile cost);
* ``{"op": "generate", "key": K, "prompt": "...", "prompt_ids": [...], "max_new_tokens": N,
  "temperature": T, "seed": S}`` - one request through ``outlines.Generator`` as a user calls it;
* ``{"op": "quit"}``.

Timing follows the project's DecodeStats: ``prefill_s`` is the first forward of ``generate`` (the
prompt), ``decode_s`` the rest of the call plus one median decode forward, because in
transformers the first token comes out of the prompt forward while the project's loop spends one
more single-token forward on it (so both count the same forwards per generated token). ``wall_s``
is the whole call, uncorrected. ``generated_tokens`` excludes EOS. Nothing but protocol lines goes
to stdout; logs go to stderr.

``--self-test SCHEMA.json`` runs one greedy request and prints the reply (a manual check).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import threading
import time
import traceback
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def _rss_mb() -> float:
    try:
        import psutil

        return psutil.Process().memory_info().rss / 2**20
    except Exception:  # noqa: BLE001
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


class PeakRSS:
    """Highest RSS seen while the block runs (sampled every 20 ms), in MiB."""

    def __init__(self) -> None:
        self.peak = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss_mb())
            self._stop.wait(0.02)

    def __enter__(self) -> "PeakRSS":
        self.peak = _rss_mb()
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_mb())


DTYPES = {"fp32": lambda: __import__("torch").float32, "bf16": lambda: __import__("torch").bfloat16,
          "fp16": lambda: __import__("torch").float16, "fp16w": lambda: __import__("torch").float32,
          "int8w": lambda: __import__("torch").float32}
PACKED = {"fp16w": "fp16", "int8w": "int8"}  # as the project's models.torch.dtypes.PACKED_TAGS


def _pack(model: Any, weights: str) -> None:
    """Give the peer the same packed linear layers as the project's ``fp16w`` / ``int8w`` target
    (the module only needs torch, so it is loaded from the source file, not the installed package)."""
    import importlib.util
    import types

    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "constrained_spec")
    if "constrained_spec" not in sys.modules:  # cpu_linear imports .errors: a bare package shell
        pkg = types.ModuleType("constrained_spec")
        pkg.__path__ = [root]
        sys.modules["constrained_spec"] = pkg
    for name in ("errors", "cpu_linear"):
        spec = importlib.util.spec_from_file_location(f"constrained_spec.{name}", os.path.join(root, f"{name}.py"))
        mod = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = mod
        spec.loader.exec_module(mod)
    sys.modules["constrained_spec.models.torch.packed_linear"].pack_linears(model, keep_head_weight=False, weights=weights)


class Peer:
    def __init__(self, model_path: str, threads: int | None, dtype: str = "fp32", device: str = "cpu") -> None:
        import outlines
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if threads:
            torch.set_num_threads(threads)
        t0 = time.perf_counter()
        self.hf_tokenizer = AutoTokenizer.from_pretrained(model_path, local_files_only=True)
        self.hf_model = AutoModelForCausalLM.from_pretrained(model_path, dtype=DTYPES[dtype](), local_files_only=True).eval()
        if dtype in PACKED:
            _pack(self.hf_model, PACKED[dtype])
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        if self.cuda:
            self.hf_model.to(self.device)
        self.load_s = time.perf_counter() - t0
        self.model = outlines.from_transformers(self.hf_model, self.hf_tokenizer)
        self.generators: dict[str, Any] = {}
        self.eos_ids = {i for i in [self.hf_tokenizer.eos_token_id, getattr(self.hf_model.generation_config, "eos_token_id", None)] if i is not None}
        self._forward_times: list[tuple[float, float]] = []
        self._last_output: Any = None
        self.hf_model.register_forward_pre_hook(self._pre)
        self.hf_model.register_forward_hook(self._post)
        original_generate = self.hf_model.generate

        def capture(*args: Any, **kwargs: Any) -> Any:  # keeps the output ids outlines decodes
            out = original_generate(*args, **kwargs)
            self._last_output = out
            return out

        self.hf_model.generate = capture  # instance attribute: outlines calls self.model.generate
        with torch.inference_mode():  # first-call initialisation out of the timings
            self.hf_model(input_ids=torch.tensor([[1, 2, 3, 4, 5, 6, 7, 8]], device=self.device))
        self._forward_times.clear()
        try:
            from importlib.metadata import version

            self.versions = {p: version(p) for p in ("outlines", "outlines_core", "transformers", "torch")}
        except Exception:  # noqa: BLE001
            self.versions = {}

    def _pre(self, *_: Any) -> None:
        self._forward_times.append((time.perf_counter(), 0.0))

    def _post(self, *_: Any) -> None:
        if self.cuda:  # a forward's time on the GPU ends when its kernels do
            __import__("torch").cuda.synchronize(self.device)
        start, _unused = self._forward_times[-1]
        self._forward_times[-1] = (start, time.perf_counter())

    def compile(self, key: str, schema: Any) -> dict[str, Any]:
        import outlines
        from outlines.types import JsonSchema

        t0 = time.perf_counter()
        # whitespace_pattern="" : compact JSON, as the project's default SchemaOptions(whitespace="compact")
        self.generators[key] = outlines.Generator(self.model, JsonSchema(schema, whitespace_pattern=""))
        return {"ok": True, "compile_s": time.perf_counter() - t0}

    def generate(self, req: dict[str, Any]) -> dict[str, Any]:
        import torch

        gen = self.generators[req["key"]]
        prompt = req["prompt"]
        text_in = self.model.type_adapter.format_input(prompt)
        ids_in = self.model.tokenizer.encode(text_in)[0][0].tolist()
        temperature = float(req.get("temperature", 0.0))
        kwargs: dict[str, Any] = {"max_new_tokens": int(req["max_new_tokens"])}
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature, top_k=0, top_p=1.0)
        else:
            kwargs.update(do_sample=False)
        kwargs["pad_token_id"] = self.hf_tokenizer.pad_token_id if self.hf_tokenizer.pad_token_id is not None else self.hf_tokenizer.eos_token_id
        torch.manual_seed(int(req.get("seed", 0)))
        self._forward_times.clear()
        self._last_output = None
        with PeakRSS() as mem, torch.inference_mode():
            t0 = time.perf_counter()
            text = gen(prompt, **kwargs)
            wall = time.perf_counter() - t0
        out = self._last_output
        new_ids = out[0, len(ids_in):].tolist() if out is not None else []
        tokens = []
        for t in new_ids:
            if t in self.eos_ids:
                break
            tokens.append(t)
        durations = [b - a for a, b in self._forward_times if b]
        prefill = durations[0] if durations else 0.0
        median_fwd = statistics.median(durations[1:]) if len(durations) > 1 else prefill
        decode = max(wall - prefill + median_fwd, 1e-9)
        return {
            "ok": True,
            "text": text,
            "token_ids": tokens,
            "generated_tokens": len(tokens),
            "forwards": len(durations),
            "wall_s": wall,
            "prefill_s": prefill,
            "decode_s": decode,
            "median_forward_s": median_fwd,
            "tokens_per_second": len(tokens) / decode,
            "peak_rss_mb": mem.peak,
            "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            "prompt_ids_match": (ids_in == list(req["prompt_ids"])) if req.get("prompt_ids") is not None else None,
            "stop": "eos" if len(tokens) < len(new_ids) else "max_new_tokens",
        }


def serve(peer: Peer) -> int:
    out = sys.stdout
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        try:
            req = json.loads(line)
            op = req.get("op")
            if op == "quit":
                break
            if op == "compile":
                reply = peer.compile(req["key"], req["schema"])
            elif op == "generate":
                reply = peer.generate(req)
            else:
                reply = {"ok": False, "error": f"unknown op {op!r}"}
        except Exception as exc:  # noqa: BLE001 - one failed request must not end the peer
            traceback.print_exc(file=sys.stderr)
            reply = {"ok": False, "error": f"{type(exc).__name__}: {str(exc)[:500]}"}
        out.write(json.dumps(reply) + "\n")
        out.flush()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", required=True, help="a transformers model folder (the converted target)")
    p.add_argument("--dtype", default="fp32", choices=sorted(DTYPES), help="weights dtype (match the project's run)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N (match the project's target)")
    p.add_argument("--self-test", metavar="SCHEMA", help="run one greedy request for SCHEMA (a .json file) and exit")
    args = p.parse_args(argv)
    real_stdout = sys.stdout
    sys.stdout = sys.stderr  # library chatter during loading must not reach the protocol stream
    try:
        peer = Peer(args.model, args.threads, args.dtype, args.device)
    except Exception as exc:  # noqa: BLE001
        traceback.print_exc(file=sys.stderr)
        real_stdout.write(json.dumps({"ready": False, "error": f"{type(exc).__name__}: {str(exc)[:500]}"}) + "\n")
        real_stdout.flush()
        return 1
    sys.stdout = real_stdout
    if args.self_test:
        with open(args.self_test) as fh:
            schema = json.load(fh)
        print(json.dumps(peer.compile("s", schema)))
        print(json.dumps(peer.generate({"key": "s", "prompt": "Give one example value.\n\nAnswer with a single JSON value that follows this JSON Schema:\n" + json.dumps(schema), "max_new_tokens": 200})))
        return 0
    sys.stdout.write(json.dumps({"ready": True, "load_s": peer.load_s, "versions": peer.versions,
                                 "python": sys.executable, "threads": __import__("torch").get_num_threads()}) + "\n")
    sys.stdout.flush()
    return serve(peer)


if __name__ == "__main__":
    sys.exit(main())
