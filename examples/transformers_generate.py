"""transformers' door: a Pydantic model as the output of ``model.generate``, then the same call by
the exact speculative loop (the assistant model as the draft), token for token the same greedy output.

    python examples/transformers_generate.py           # Qwen2.5-Coder 1.5B / 0.5B from the hub
    python examples/transformers_generate.py --tiny    # offline smoke run with random tiny models
"""

from __future__ import annotations

import argparse
from typing import Literal

from _models import add_model_args, load_transformers
from pydantic import BaseModel, Field

from constrained_spec import Regex
from constrained_spec.integrations.transformers import ConstrainedLogitsProcessor, generate


class City(BaseModel):
    name: str = Field(max_length=30)
    country: str = Field(max_length=30)
    size: Literal["small", "medium", "large"]


def main() -> None:
    args = add_model_args(argparse.ArgumentParser(description=__doc__)).parse_args()
    model, draft, tokenizer = load_transformers(args)
    prompt = "Name a city and its country, as JSON."
    text = tokenizer.apply_chat_template([{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True) \
        if getattr(tokenizer, "chat_template", None) else prompt + "\n"
    inputs = tokenizer([text], return_tensors="pt")
    n = inputs["input_ids"].shape[1]

    # 1. model.generate with the processor: every row follows its type
    processor = ConstrainedLogitsProcessor(City, tokenizer)
    out = model.generate(**inputs, logits_processor=[processor], do_sample=False, max_new_tokens=80)
    city = processor.parse(tokenizer.decode(out[0, n:], skip_special_tokens=True))
    print("processor:", city.model_dump_json())

    # 2. the drop-in: the same greedy tokens by draft, verify, accept, roll back
    fast = generate(model, tokenizer, output_type=City, assistant_model=draft, do_sample=False, max_new_tokens=80, **inputs)
    print("drop-in:", processor.parse(tokenizer.decode(fast[0, n:], skip_special_tokens=True)).model_dump_json())
    print("same tokens:", fast.tolist() == out.tolist())

    # 3. rows with their own grammars in one batch
    batch = tokenizer([prompt + "\n", prompt + "\n"], return_tensors="pt")
    types = [City, Regex(r"(yes|no)\. [A-Z][a-z]{2,12}")]
    rows = ConstrainedLogitsProcessor(types, tokenizer)
    out = model.generate(**batch, logits_processor=[rows], do_sample=False, max_new_tokens=80)
    for r in range(len(types)):
        print(f"row {r}:", tokenizer.decode(out[r, batch["input_ids"].shape[1]:], skip_special_tokens=True))


if __name__ == "__main__":
    main()
