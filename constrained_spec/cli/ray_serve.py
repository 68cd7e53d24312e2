"""``constrained-spec serve --ray``: the server as a Ray Serve application
(:mod:`constrained_spec.serving.ray_app`), on a local Ray or the cluster at ``--ray-address``.

The options are checked before Ray starts; the models load on the replicas, never here.
"""

from __future__ import annotations

import argparse
import logging
import time
from typing import Any

from constrained_spec.cli.args import non_negative_float, non_negative_int, positive_int

__all__ = ["add_ray_arguments", "deploy_options", "run_ray"]

log = logging.getLogger("constrained_spec")


def add_ray_arguments(p: argparse.ArgumentParser) -> None:
    """The ``--ray`` options of ``serve``."""
    g = p.add_argument_group("Ray Serve (--ray)")
    g.add_argument("--ray", action="store_true", help="serve as a Ray Serve application: replicas, autoscaling, constraint affinity (needs constrained-spec[ray])")
    g.add_argument("--ray-address", default=None, help="a running Ray cluster (e.g. auto, or ray://head:10001); default: $RAY_ADDRESS, else a local Ray")
    g.add_argument("--replicas", type=positive_int, default=1, help="model replicas (each loads the models once; default 1)")
    g.add_argument("--min-replicas", type=non_negative_int, default=None, help="autoscaling lower bound (with --max-replicas)")
    g.add_argument("--max-replicas", type=positive_int, default=None, help="autoscaling upper bound (with --min-replicas)")
    g.add_argument("--num-cpus-per-replica", type=non_negative_float, default=1.0, help="CPUs Ray reserves per replica (default 1)")
    g.add_argument("--num-gpus-per-replica", type=non_negative_float, default=0.0, help="GPUs Ray reserves per replica (default 0; 1 = one GPU each)")
    g.add_argument("--max-ongoing-requests", type=positive_int, default=4, help="requests Serve sends one replica at once (default 4)")
    g.add_argument("--max-queued-requests", type=non_negative_int, default=32,
                   help="requests that may wait for a replica; more get a 503 all_replicas_busy (default 32)")


def deploy_options(args: argparse.Namespace) -> Any:
    """The :class:`RayServeOptions` of the parsed arguments (a ConfigError where they disagree)."""
    from constrained_spec.serving.ray_app import RayServeOptions

    return RayServeOptions(replicas=args.replicas, min_replicas=args.min_replicas, max_replicas=args.max_replicas,
                           num_cpus_per_replica=args.num_cpus_per_replica, num_gpus_per_replica=args.num_gpus_per_replica,
                           max_ongoing_requests=args.max_ongoing_requests, max_queued_requests=args.max_queued_requests)


def run_ray(args: argparse.Namespace, app_options: dict[str, Any]) -> int:
    """Deploy on Ray Serve and wait until interrupted; then shut the application down gracefully."""
    from constrained_spec.cli.args import model_config
    from constrained_spec.serving.ray_app import ReplicaOptions, build_app, import_ray_serve

    deploy = deploy_options(args)  # before Ray starts: a bad combination is one line
    models = model_config(args)
    replica = ReplicaOptions(model=models.model, draft=models.draft, dtype=models.dtype, draft_dtype=models.draft_dtype,
                             cache_dir=None if models.cache_dir is None else str(models.cache_dir), device=models.device, num_draft_tokens=args.num_draft_tokens,
                             max_new_tokens=args.max_new_tokens, compile_timeout=args.compile_timeout, app_options=app_options,
                             max_batch_size=args.max_batch_size, batch_max_tokens=args.batch_max_tokens, prefix_cache_mb=args.prefix_cache_mb,
                             schema_hint=args.schema_hint)
    ray, serve = import_ray_serve()
    ray.init(address=args.ray_address, ignore_reinit_error=True)
    serve.start(http_options={"host": args.host, "port": args.port})
    log.info("deploying %s replica(s); each loads the models before it takes requests", deploy.replicas if deploy.min_replicas is None
             else f"{deploy.min_replicas}-{deploy.max_replicas}")
    try:  # an interrupt while the replicas load deletes the application too
        serve.run(build_app(replica, deploy), name=deploy.app_name, route_prefix=deploy.route_prefix)
        log.info("serving on http://%s:%d/v1 (Ctrl-C stops)", args.host, args.port)
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        log.info("shutting down: replicas finish their in-flight requests first")
    finally:
        serve.delete(deploy.app_name)
        serve.shutdown()
    return 0
