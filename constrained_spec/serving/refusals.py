"""The serving layer's own conditions: of the server and the client, not of the constraint.

Each maps to one HTTP status and code in :mod:`.errors` (``SERVING_ERRORS``).
"""

from __future__ import annotations

__all__ = ["AmbiguousCredentials", "BodyReadersFull", "BodyTimeout", "Cancelled", "ClientCompilesFull", "CompileQueueFull", "QueueFull", "QueueTimeout",
           "ServerStopping", "ServingRefusal"]


class QueueFull(Exception):
    """The queue holds ``max_queue`` waiting requests already."""

    def __init__(self, max_queue: int) -> None:
        super().__init__(f"{max_queue} requests are already waiting")
        self.max_queue = max_queue


class QueueTimeout(Exception):
    """A request outlived the timeout (waiting and/or decoding)."""


class Cancelled(Exception):
    """Raised from the ``on_tokens`` hook to stop a generation nobody waits for any more."""


class ServingRefusal(Exception):
    """Base class of the refusals below."""


class BodyTimeout(ServingRefusal):
    """The request body did not arrive within ``seconds`` of the request's start (408)."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"the request body did not arrive within {seconds:g} s")
        self.seconds = seconds


class BodyReadersFull(ServingRefusal):
    """``limit`` connections are sending their bodies already (429)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"{limit} requests are sending their bodies already")
        self.limit = limit


class AmbiguousCredentials(ServingRefusal):
    """More than one ``Authorization`` header (401): which one counts is not guessed."""


class CompileQueueFull(ServingRefusal):
    """``max_waiting`` compiles wait already, beyond the running ones (429)."""

    def __init__(self, max_waiting: int) -> None:
        super().__init__(f"{max_waiting} constraint compiles are already waiting")
        self.max_waiting = max_waiting


class ClientCompilesFull(ServingRefusal):
    """One client has started ``limit`` compiles that have not ended (429)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"this client has {limit} constraint compiles under way already")
        self.limit = limit


class ServerStopping(ServingRefusal):
    """The server stopped before answering: the request was still running when the shutdown's
    grace period (``shutdown_timeout``) ended and was cancelled (503; retry on another replica)."""

    def __init__(self) -> None:
        super().__init__("the server is shutting down; the request was cancelled before it finished, retry it")
