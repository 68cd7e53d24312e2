"""The ``device`` option: spelling, what ``auto`` resolves to, the CUDA/dtype errors, and a
Generator that loads and decodes on the device it was given.

On a machine without CUDA (CI) ``cuda`` must be a named ConfigError raised before any model is
read, and ``auto`` must mean the CPU; on a CUDA machine the last test loads the tiny pair there.
"""

from __future__ import annotations

import argparse
import json
import re

import jsonschema
import pytest
import torch
from cli_support import run_cli

from constrained_spec.config import ModelConfig
from constrained_spec.errors import ConfigError, ConstrainedSpecError
from constrained_spec.models.torch import devices
from constrained_spec.models.torch.dtypes import PACKED_TAGS, auto_dtype

HAS_CUDA = torch.cuda.is_available()
SCHEMA = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"], "additionalProperties": False}


@pytest.mark.parametrize("text,expected", [("auto", "auto"), (None, "auto"), ("CPU", "cpu"), (" cuda ", "cuda"), ("cuda:1", "cuda:1"),
                                           (torch.device("cpu"), "cpu")])
def test_device_names_normalize(text, expected):
    assert devices.normalize_device(text) == expected


@pytest.mark.parametrize("text", ["gpu", "cuda:", "cuda:x", "cuda:-1", "mps0", ""])
def test_unknown_device_names_are_config_errors_that_list_the_choices(text):
    with pytest.raises(ConfigError, match="choose auto .*cpu, cuda or cuda:N"):
        devices.normalize_device(text)


def test_auto_resolves_to_cuda_when_torch_sees_a_gpu_else_cpu():
    got = devices.resolve_device("auto")
    assert got == (f"cuda:{torch.cuda.current_device()}" if HAS_CUDA else "cpu")
    assert devices.resolve_device("cpu") == "cpu"


@pytest.mark.skipif(HAS_CUDA, reason="there is a CUDA device here")
@pytest.mark.parametrize("name", ["cuda", "cuda:0", "cuda:3"])
def test_cuda_without_cuda_is_a_named_config_error(name):
    with pytest.raises(ConfigError) as info:
        devices.resolve_device(name)
    message = str(info.value)
    assert repr(name) in message and "CUDA is not available" in message and "--device cpu" in message


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_a_cuda_index_past_the_last_device_is_a_config_error():
    with pytest.raises(ConfigError, match="CUDA device"):
        devices.resolve_device(f"cuda:{torch.cuda.device_count()}")


def test_auto_dtype_follows_the_device():
    from constrained_spec.models.torch.packed_linear import packing_available

    cuda_pick = "bf16" if HAS_CUDA and torch.cuda.is_bf16_supported() else "fp16"
    assert auto_dtype("target", "cuda") == auto_dtype("draft", "cuda:0") == cuda_pick
    assert auto_dtype("target", "cpu") == ("fp16w" if packing_available() else "fp32")
    assert devices.dtype_for_device("auto", "target", "cuda:0") == cuda_pick
    assert devices.dtype_for_device("auto", "draft", "cpu") == auto_dtype("draft", "cpu")
    assert devices.dtype_for_device("float16", "target", "cuda:0") == "fp16"


@pytest.mark.parametrize("tag", sorted(PACKED_TAGS))
def test_packed_dtypes_on_cuda_are_config_errors_naming_the_problem(tag):
    with pytest.raises(ConfigError, match=rf"dtype '{tag}' is a CPU-only layout .*cuda:0.*bf16"):
        devices.dtype_for_device(tag, "target", "cuda:0")
    assert devices.dtype_for_device(tag, "target", "cpu") == tag
    # the config object refuses an explicit CUDA device with a packed dtype before torch is needed
    with pytest.raises(ConfigError, match=f"dtype '{tag}' is a CPU-only layout"):
        ModelConfig(dtype=tag, device="cuda")
    with pytest.raises(ConfigError, match=f"draft_dtype '{tag}'"):
        ModelConfig(draft_dtype=tag, device="cuda:1")
    assert ModelConfig(dtype=tag, device="cpu").device == "cpu"


def test_model_config_and_cli_carry_the_device():
    from constrained_spec.cli.args import add_model_arguments, model_config

    assert ModelConfig().device == "auto" and ModelConfig(device="CUDA:2").device == "cuda:2"
    with pytest.raises(ConfigError, match="unknown device 'tpu'"):
        ModelConfig(device="tpu")
    p = argparse.ArgumentParser()
    add_model_arguments(p)
    assert model_config(p.parse_args([])).device == "auto"
    assert model_config(p.parse_args(["--device", "cuda:1"])).device == "cuda:1"
    with pytest.raises(SystemExit):
        p.parse_args(["--device", "gpu"])


def test_generator_built_on_cpu_decodes(tiny_generator):
    gen = tiny_generator(device="cpu", max_new_tokens=40, num_draft_tokens=3)
    assert gen.target.device == torch.device("cpu") and gen.draft.device == torch.device("cpu")
    result = gen.run("Give ok.", SCHEMA, seed=0, debug_checks=True)
    jsonschema.validate(json.loads(result.text), SCHEMA)


@pytest.mark.skipif(HAS_CUDA, reason="there is a CUDA device here")
def test_generator_asked_for_cuda_without_cuda_fails_before_loading(model_dirs, tmp_path, monkeypatch):
    import constrained_spec.models.torch.resolve as store
    from constrained_spec.api import Generator

    def no_load(*args, **kwargs):
        raise AssertionError("nothing may load when the device does not exist")

    monkeypatch.setattr(store, "resolve_model_path", no_load)
    with pytest.raises(ConfigError, match="'cuda' was asked for but CUDA is not available"):
        Generator(model_dirs[0], None, device="cuda", cache_dir=tmp_path, progress=False)
    # a model object given with an explicit device it is not on: the same named error, not a traceback later
    from tiny_models import tiny_llama

    with pytest.raises(ConfigError, match="CUDA is not available"):
        Generator(tiny_llama(50257, seed=1), None, tokenizer=object(), device="cuda:0", progress=False)


def test_packed_dtype_with_cuda_is_refused_by_the_generator(model_dirs, tmp_path):
    from constrained_spec.api import Generator

    with pytest.raises(ConstrainedSpecError, match="fp16w|CUDA is not available"):
        Generator(model_dirs[0], None, device="cuda", dtype="fp16w", cache_dir=tmp_path, progress=False)


def test_cli_device_errors_are_one_line(model_dirs, tmp_path):
    out = run_cli("generate", "--schema", "schemas/person.json", "--prompt", "x", "--model", model_dirs[0], "--draft", "none",
                  "--device", "gpu", cache=tmp_path)
    assert out.returncode == 2 and "unknown device 'gpu'" in out.stderr and "Traceback" not in out.stderr
    if not HAS_CUDA:
        out = run_cli("generate", "--schema", "schemas/person.json", "--prompt", "x", "--model", model_dirs[0], "--draft", "none",
                      "--device", "cuda", cache=tmp_path)
        assert out.returncode == 1 and "Traceback" not in out.stderr
        assert re.search(r"device 'cuda' was asked for but CUDA is not available", out.stderr), out.stderr
        assert len(out.stderr.strip().splitlines()) == 1, out.stderr


@pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA device")
def test_generator_on_cuda_loads_half_weights_and_decodes(model_dirs, tmp_path):
    """Folders loaded with device='cuda': weights on the GPU in bf16/fp16, the Triton verifier chosen,
    and a valid value out."""
    from constrained_spec.api import Generator

    gen = Generator(model_dirs[0], model_dirs[1], device="cuda", cache_dir=tmp_path, progress=False, max_new_tokens=40)
    assert gen.target.device.type == "cuda" and gen.draft.device.type == "cuda"
    assert gen.target.model.dtype in (torch.bfloat16, torch.float16)
    from constrained_spec.sampling.kernels import resolve_backend

    assert resolve_backend("auto") == "triton"
    result = gen.run("Give ok.", SCHEMA, seed=0, debug_checks=True)
    jsonschema.validate(json.loads(result.text), SCHEMA)
