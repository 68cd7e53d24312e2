"""Block vs one-token logits on the torch runtime: how far the logits of a verify block are from what
one-token decoding computes at the same positions.

For each dtype, context length and block size: a prompt of ``context`` seeded random tokens is
prefilled into :class:`~constrained_spec.models.torch.hf.HFModel`; the reference logits come from feeding
the continuation one token at a time; then the cache is cropped back and the same continuation is fed
in blocks of ``n`` tokens. Printed per case: max |Δlogit|, the largest logit, how many positions are
bitwise equal, argmax agreement and the largest total variation between the two softmax distributions
(T = 1). A second table does the same for the model as a batch row: the block computed in one forward
beside other rows of other lengths (padded, attention-masked), against that row's one-token logits.

The model is the real target's shape (Qwen2.5-Coder-1.5B: 28 layers, hidden 1,536, vocabulary
151,936) with seeded random weights, or a small shape (``--shape small``): numerics depend on the
kernels the shapes select, not on trained values, so no download is needed (a device machine with no
network runs it).

    python benchmarks/block_invariance.py --device cpu --shape small --dtypes fp32 bf16 fp16w int8w
    python benchmarks/block_invariance.py --device cuda --dtypes bf16 fp32 --contexts 64 600 --blocks 2 6 16
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

SHAPES: dict[str, dict[str, Any]] = {
    # Qwen2.5-Coder-1.5B-Instruct's config (the default target)
    "qwen2.5-1.5b": dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                         num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768, rope_theta=1e6,
                         tie_word_embeddings=True),
    "small": dict(hidden_size=256, intermediate_size=768, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=2, vocab_size=32000, max_position_embeddings=4096, rope_theta=1e4,
                  tie_word_embeddings=True),
}
LOGIT_TARGET = 16.0
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16, "fp16w": torch.float32, "int8w": torch.float32}
#: the CPU runtime's packed weights (fbgemm): fp32 activations over fp16 or int8 weights
PACKED = {"fp16w": "fp16", "int8w": "int8"}


def build_model(shape: str, dtype: str, device: str, attn: str, seed: int) -> Any:
    """A Qwen2 causal LM of ``shape`` with seeded random weights, in ``dtype`` on ``device``."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(seed)
    config = Qwen2Config(**SHAPES[shape], attn_implementation=attn)
    with torch.device(device):
        model = Qwen2ForCausalLM(config)
    model = model.to(DTYPES[dtype]).eval()
    if dtype in PACKED:
        from constrained_spec.models.torch.packed_linear import pack_linears

        pack_linears(model, weights=PACKED[dtype])
    # random weights give logits near 1; real ones reach 15-30 (where a bf16 logit's last bit is 0.06-0.12):
    # the final norm is scaled so that the largest logit on random tokens is about LOGIT_TARGET
    with torch.inference_mode():
        probe = torch.randint(0, config.vocab_size, (1, 32), generator=torch.Generator().manual_seed(seed))
        top = float(model(input_ids=probe.to(device)).logits.float().abs().max())
        model.model.norm.weight.mul_(LOGIT_TARGET / max(top, 1e-6))
    return model


def compare(ref: torch.Tensor, got: torch.Tensor) -> dict[str, float]:
    """Figures for one block's logits [n, V] against the one-token logits at the same positions."""
    ref, got = ref.float(), got.float()
    diff = (ref - got).abs()
    tv = 0.5 * (ref.softmax(-1) - got.softmax(-1)).abs().sum(-1)
    return {
        "max_abs": float(diff.max()),
        "max_logit": float(ref.abs().max()),
        "bitwise_positions": int((diff.amax(-1) == 0).sum()),
        "positions": int(ref.shape[0]),
        "argmax_equal": int((ref.argmax(-1) == got.argmax(-1)).sum()),
        "max_tv": float(tv.max()),
    }


@torch.inference_mode()
def sequence_case(model: Any, context: int, blocks: list[int], seed: int) -> list[dict[str, Any]]:
    """One sequence: blocks of each size against one-token decoding, after a ``context``-token prompt."""
    from constrained_spec.models.torch.hf import HFModel

    g = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    span = max(blocks)
    prompt = torch.randint(0, vocab, (context,), generator=g).tolist()
    cont = torch.randint(0, vocab, (span,), generator=g).tolist()
    seq = HFModel(model)
    seq.prefill(prompt)
    ref = torch.cat([seq.extend([t]) for t in cont])  # one token at a time
    rows = []
    for n in blocks:
        seq.crop(context)
        got = torch.cat([seq.extend(cont[i : i + n]) for i in range(0, span, n)])
        rows.append({"mode": "sequence", "context": context, "block": n, **compare(ref, got)})
    return rows


@torch.inference_mode()
def batch_row_case(model: Any, context: int, n: int, neighbours: int, seed: int) -> dict[str, Any]:
    """Row 0 verifies an ``n``-token block in one padded forward beside ``neighbours`` rows of other
    lengths; compared with row 0's one-token logits (a fresh full forward per position, no cache)."""
    g = torch.Generator().manual_seed(seed)
    vocab = model.config.vocab_size
    device = next(model.parameters()).device
    lengths = [context + n] + [max(2, context + n - 7 * (i + 1)) for i in range(neighbours)]
    seqs = [torch.randint(0, vocab, (L,), generator=g) for L in lengths]
    width = max(lengths)
    ids = torch.zeros(len(seqs), width, dtype=torch.long)
    mask = torch.zeros(len(seqs), width, dtype=torch.long)
    for i, s in enumerate(seqs):  # left padding, as batched generation pads
        ids[i, width - len(s):] = s
        mask[i, width - len(s):] = 1
    out = model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits[0, -n:]
    from constrained_spec.models.torch.hf import HFModel

    seq = HFModel(model)  # row 0 alone, one token at a time on its cache
    seq.prefill(seqs[0][:context].tolist())
    ref = torch.cat([seq.extend([int(t)]) for t in seqs[0][context:]])
    return {"mode": f"row beside {neighbours}", "context": context, "block": n, **compare(ref, out)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen2.5-1.5b")
    ap.add_argument("--dtypes", nargs="+", choices=sorted(DTYPES), default=["fp32", "bf16"])
    ap.add_argument("--attn", nargs="+", default=["sdpa", "eager"], help="transformers attention implementations")
    ap.add_argument("--contexts", nargs="+", type=int, default=[64, 600])
    ap.add_argument("--blocks", nargs="+", type=int, default=[2, 6, 16])
    ap.add_argument("--neighbours", type=int, default=3, help="other rows beside the measured one (0: no row table)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", default=None, help="write the rows here too")
    args = ap.parse_args(argv)

    results: list[dict[str, Any]] = []
    print("dtype attn    mode            context block  max|Δ|     max|logit| bitwise  argmax  max TV")
    for dtype in args.dtypes:
        for attn in args.attn:
            start = time.perf_counter()
            model = build_model(args.shape, dtype, args.device, attn, args.seed)
            rows = []
            for context in args.contexts:
                rows += sequence_case(model, context, args.blocks, args.seed + context)
                if args.neighbours:
                    rows += [batch_row_case(model, context, n, args.neighbours, args.seed + context + n) for n in args.blocks]
            for r in rows:
                r.update(dtype=dtype, attn=attn, device=args.device, shape=args.shape)
                print(f"{dtype:5} {attn:7} {r['mode']:15} {r['context']:7} {r['block']:5}  {r['max_abs']:<10.3g} {r['max_logit']:<10.3g} "
                      f"{r['bitwise_positions']:>3}/{r['positions']:<4} {r['argmax_equal']:>3}/{r['positions']:<3} {r['max_tv']:.3g}",
                      flush=True)
            results += rows
            print(f"# {dtype} {attn}: {time.perf_counter() - start:.1f} s", flush=True)
            del model
            if args.device.startswith("cuda"):
                torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "torch": torch.__version__,
                                               "device_name": torch.cuda.get_device_name() if args.device.startswith("cuda") else "cpu",
                                               "rows": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
