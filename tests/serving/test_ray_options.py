"""The Ray Serve application's parts that need no Ray: the constraint key, the deployment options,
the missing-extra error, the ``serve --ray`` argument checks, the in-process ASGI driver."""

from __future__ import annotations

import asyncio
import json
import sys

import pytest

from constrained_spec.errors import ConfigError, ConstrainedSpecError
from constrained_spec.serving.ray_app import RayServeOptions, RayUnavailableError, app_builder, constraint_key, drive_asgi, import_ray_serve

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}


def body(**fields) -> bytes:
    return json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}], **fields}).encode()


def test_constraint_key_follows_the_constraint_not_the_rest():
    fmt = {"type": "json_schema", "json_schema": {"name": "x", "schema": SCHEMA}}
    key = constraint_key(body(response_format=fmt, seed=1))
    assert key.startswith("c-")
    assert constraint_key(body(response_format=fmt, seed=2, temperature=0.5)) == key  # sampling options do not matter
    reordered = {"json_schema": {"schema": dict(reversed(list(SCHEMA.items()))), "name": "x"}, "type": "json_schema"}
    assert constraint_key(body(response_format=reordered)) == key  # key order does not matter
    other = {"type": "json_schema", "json_schema": {"name": "x", "schema": {**SCHEMA, "required": []}}}
    assert constraint_key(body(response_format=other)) != key
    assert constraint_key(body(guided_regex="[0-9]+")) not in ("", key)
    assert constraint_key(body(guided_regex="[0-9]+")) != constraint_key(body(structured_outputs={"regex": "[0-9]+"}))
    assert constraint_key(body()) == "" and constraint_key(b"not json") == "" and constraint_key(b"[1]") == ""


def test_deploy_options_fixed_and_autoscaling():
    fixed = RayServeOptions(replicas=3, num_cpus_per_replica=2, num_gpus_per_replica=1).replica_deployment_options()
    assert fixed["num_replicas"] == 3 and "autoscaling_config" not in fixed
    assert fixed["ray_actor_options"] == {"num_cpus": 2, "num_gpus": 1}
    auto = RayServeOptions(min_replicas=0, max_replicas=4).replica_deployment_options()
    assert "num_replicas" not in auto and auto["autoscaling_config"]["min_replicas"] == 0 and auto["autoscaling_config"]["max_replicas"] == 4
    assert auto["autoscaling_config"]["initial_replicas"] == 1  # the app is reachable at once


@pytest.mark.parametrize("bad", [{"replicas": 0}, {"min_replicas": 1}, {"min_replicas": 3, "max_replicas": 2}, {"min_replicas": 0, "max_replicas": 0},
                                 {"num_gpus_per_replica": -1}, {"max_ongoing_requests": 0}, {"retries": -1}])
def test_bad_deploy_options_are_config_errors(bad):
    with pytest.raises(ConfigError):
        RayServeOptions(**bad)


def test_app_builder_refuses_unknown_args():
    with pytest.raises(ConfigError, match="unknown args"):
        app_builder({"replica": {"model": "m"}, "replicas": 2})


def test_missing_ray_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    with pytest.raises(RayUnavailableError, match=r"pip install 'constrained-spec\[ray\]'") as info:
        import_ray_serve()
    assert isinstance(info.value, ConstrainedSpecError)


def test_serve_ray_without_ray_is_one_line(monkeypatch, capsys):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from constrained_spec import cli

    monkeypatch.setitem(sys.modules, "ray", None)
    assert cli.main(["serve", "--ray", "--replicas", "2", "--model", "m", "--draft", "none"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "constrained-spec[ray]" in err[0], err


def test_serve_ray_bad_bounds_refused_before_ray(monkeypatch, capsys):
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    from constrained_spec import cli

    monkeypatch.setitem(sys.modules, "ray", None)  # the check comes first: Ray is never imported
    assert cli.main(["serve", "--ray", "--min-replicas", "2", "--model", "m"]) == 1
    err = capsys.readouterr().err
    assert "min_replicas and max_replicas" in err and "ray]" not in err


def test_serve_ray_hands_the_schema_hint_to_the_replicas(monkeypatch):
    """``serve --ray --schema-hint types`` reaches the replicas' options (their Generator's style)."""
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    import constrained_spec.serving.ray_app as ray_app
    from constrained_spec.cli.ray_serve import run_ray
    from constrained_spec.cli.serve import build_parser

    seen: list = []

    def stop() -> None:
        raise RuntimeError("stop before Ray")

    real = ray_app.ReplicaOptions
    monkeypatch.setattr(ray_app, "ReplicaOptions", lambda **kw: seen.append(real(**kw)) or seen[-1])
    monkeypatch.setattr(ray_app, "import_ray_serve", stop)
    for argv, want in ((["--ray", "--schema-hint", "full"], "full"), (["--ray"], "types")):
        with pytest.raises(RuntimeError, match="stop before Ray"):
            run_ray(build_parser().parse_args(argv + ["--model", "m", "--draft", "none"]), {})
        assert seen[-1].schema_hint == want


def test_drive_asgi_runs_the_app_in_process():
    """The driver hands the app the body and relays status, headers and chunks; a streaming app sees
    the disconnect once the reader stops early."""
    fastapi = pytest.importorskip("fastapi")
    from starlette.responses import StreamingResponse

    app = fastapi.FastAPI()
    seen: list[str] = []

    @app.post("/echo")
    async def echo(payload: dict) -> dict:
        return {"got": payload}

    async def stream(request):  # a plain Starlette endpoint (no annotation to resolve)
        async def chunks():
            try:
                for i in range(1000):
                    if await request.is_disconnected():
                        break
                    yield f"{i}\n".encode()
                    await asyncio.sleep(0.001)
            finally:  # a disconnect ends the stream early, whether seen here or by Starlette's listener (a cancel)
                seen.append(i)

        return StreamingResponse(chunks())

    app.add_route("/stream", stream, methods=["GET"])

    async def scenario():
        out = [m async for m in drive_asgi(app, "POST", "/echo", b"", [(b"content-type", b"application/json")], b'{"x": 1}')]
        assert out[0]["status"] == 200 and json.loads(b"".join(out[1:])) == {"got": {"x": 1}}
        missing = [m async for m in drive_asgi(app, "GET", "/nope", b"", [], b"")]
        assert missing[0]["status"] == 404
        reader = drive_asgi(app, "GET", "/stream", b"", [], b"")
        assert (await reader.__anext__())["status"] == 200
        assert await reader.__anext__() == b"0\n"
        await reader.aclose()
        await asyncio.sleep(0.05)

    asyncio.run(scenario())
    assert len(seen) == 1 and seen[0] < 900  # stopped long before its 1000 chunks


def test_shipped_serve_config_is_valid_and_builds():
    """deploy/ray-serve.yaml parses as Serve's deploy schema and its args build the application
    (needs ray, no cluster: building binds the deployments, it starts nothing)."""
    pytest.importorskip("ray.serve", reason="ray is not installed: pip install 'constrained-spec[ray]'")
    yaml = pytest.importorskip("yaml")
    from pathlib import Path

    from ray.serve.schema import ServeDeploySchema

    text = (Path(__file__).resolve().parents[2] / "deploy" / "ray-serve.yaml").read_text()
    config = ServeDeploySchema.model_validate(yaml.safe_load(text)) if hasattr(ServeDeploySchema, "model_validate") else ServeDeploySchema.parse_obj(yaml.safe_load(text))
    (application,) = config.applications
    assert application.import_path == "constrained_spec.serving.ray_app:app_builder"
    app = app_builder(application.args)
    assert type(app).__name__ == "Application"
    assert RayServeOptions(**application.args["deploy"]).replica_deployment_options()["autoscaling_config"]["max_replicas"] == 4
