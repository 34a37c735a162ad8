"""Ctrl-C held while something must not be cut short: a utility of the bottom layer (standard library
only), so that any layer may use it.

Users press Ctrl-C twice. A second ``KeyboardInterrupt`` inside the cleanup of the first would leave
work half done: a Ray round's tasks and actors running (``exec/ray.py``), a run's status ``running``
instead of ``interrupted`` (``loop.py``), the command's "what was kept" line unsaid (``cli/run.py``).
:func:`ctrl_c_deferred` runs such a block to its end and then hands the held Ctrl-C on.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any


@contextlib.contextmanager
def ctrl_c_deferred(doing: str | None = None, at_most_s: float = 0.0, *, leave_hint: Callable[[], str] | None = None,
                    raise_after: bool = True) -> Iterator[None]:
    """Run the block to its end even if Ctrl-C (SIGINT) arrives meanwhile.

    The block must be bounded (every wait in it has a time limit: ``at_most_s`` in all). A Ctrl-C that
    arrives in it is recorded, not raised; when ``doing`` is given the first one says on stderr, in one
    line, what is being finished and how to leave at once (``kill -9``, and ``leave_hint()``: what that
    leaves behind). When the block ends, the previous SIGINT handler gets the recorded Ctrl-C (Python's
    raises ``KeyboardInterrupt``, the CLI's also remembers it) unless ``raise_after`` is false (the
    caller is stopping because of an earlier Ctrl-C anyway). Only in the main thread, and only while
    SIGINT has a Python handler (the default one or a program's); elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if not callable(previous):  # ignored, the OS default, or a handler set outside Python: left alone
        yield
        return
    got: list[Any] = []

    def defer(signum: int, frame: Any) -> None:
        got.append(frame)
        if doing is not None and len(got) == 1:
            left = f" ({leave_hint()})" if leave_hint is not None else ""
            # os.write, not print: the main thread may be inside a write to sys.stderr right now
            with contextlib.suppress(OSError):
                os.write(2, (f"hetsched: Ctrl-C: {doing} first (at most {at_most_s:.0f} s), then it stops; nothing "
                             f"recorded is lost. To leave at once: kill -9 {os.getpid()}{left}\n").encode())

    signal.signal(signal.SIGINT, defer)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if got and raise_after:
        previous(signal.SIGINT, got[0])
