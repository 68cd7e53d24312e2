"""An app under a real uvicorn server for tests that need a socket (streams over HTTP, slow bodies,
schemathesis): on a free loopback port the OS picks, on a daemon thread, stopped on exit."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from typing import Any, Iterator
from urllib.parse import urlsplit

__all__ = ["port_of", "serving"]


@contextmanager
def serving(app: Any, *, log_level: str = "warning", lifespan: str = "auto", start_timeout: float = 30.0) -> Iterator[str]:
    """``app`` served by uvicorn on ``127.0.0.1`` (port 0: a free one) in a thread; yields its base
    URL (``http://127.0.0.1:<port>``). Fails if the server has not started within ``start_timeout`` s."""
    import uvicorn

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level=log_level, lifespan=lifespan))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + start_timeout
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.01)
        port = server.servers[0].sockets[0].getsockname()[1]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(30)


def port_of(url: str) -> int:
    """The port of a :func:`serving` URL."""
    port = urlsplit(url).port
    assert port is not None, url
    return port
