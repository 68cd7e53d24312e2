"""A spinner with the elapsed time on stderr for work that may take a while (compilation).

:func:`progress_after` shows nothing for work that ends within ``delay`` seconds, so quick calls stay
quiet; past it a tqdm line spins until the work ends. By default it shows only on a terminal.
"""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import IO

SPINNER = "|/-\\"


@contextlib.contextmanager
def progress_after(
    label: str,
    *,
    delay: float = 1.0,
    enabled: bool | None = None,
    stream: IO[str] | None = None,
    interval: float = 0.2,
) -> Iterator[None]:
    """Run the ``with`` block; once it has run ``delay`` seconds, show ``label``, a spinner and
    the elapsed time on ``stream`` (stderr) until it ends.

    ``enabled``: ``None`` shows it only where ``stream`` is a terminal; ``True`` always (the
    command line's ``--progress``); ``False`` never.
    """
    out = sys.stderr if stream is None else stream
    if enabled is None:
        enabled = bool(getattr(out, "isatty", lambda: False)())
    if not enabled:
        yield
        return
    done = threading.Event()
    start = time.monotonic()

    def spin() -> None:
        if done.wait(delay):
            return
        from tqdm import tqdm

        bar = tqdm(total=None, file=out, desc=f"{SPINNER[0]} {label}", bar_format="{desc} [{elapsed}]",
                   leave=True, dynamic_ncols=True)
        bar.start_t -= time.monotonic() - start  # the elapsed time counts the quiet delay too
        turn = 1
        try:
            while not done.wait(interval):
                bar.set_description_str(f"{SPINNER[turn % len(SPINNER)]} {label}")
                turn += 1
            bar.set_description_str(f"{label}: done", refresh=False)
        finally:
            bar.close()

    thread = threading.Thread(target=spin, name="constrained-spec-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
