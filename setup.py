"""Build hook: compile the contention kernel with mypyc when it can, else install pure Python.

Every number hetsched prints comes from one event simulation (``hetsched/model/contention.py``), and the
searches, the ``rules`` decider and the bench spend most of their time in it. This hook compiles a copy of
that module, ``hetsched.model._contention_native``, into a C extension with mypyc (the compiler mypy ships,
which compiles black and mypy themselves): the same code, the same IEEE double arithmetic, 1.3-2.4x the
simulations a second on the searches' and decider's paths (BENCHMARKS.md, "A compiled kernel"). The copy
carries the SHA-256 of the source it was built from; ``contention.py`` switches to it only when that matches
its own text, so an edit to the source after an editable install runs the edited Python, never a stale build.

The build is optional: without mypy in the build environment, with ``HETSCHED_NO_NATIVE=1``, or when mypyc or
the C compiler fails, the package installs and runs as pure Python (a warning says why). Everything else is in
``pyproject.toml``.
"""

from __future__ import annotations

import hashlib
import os
import sys
import tempfile
from pathlib import Path

from setuptools import Extension, setup

HERE = Path(__file__).resolve().parent
SOURCE = Path("src/hetsched/model/contention.py")
COPY = Path("src/hetsched/model/_contention_native.py")


def _warn(why: str) -> None:
    print(f"hetsched: building without the compiled kernel ({why}); the pure-Python one runs instead",
          file=sys.stderr)


def native_extensions() -> list[Extension]:
    """The mypyc extensions of the kernel's copy, or none (pure Python) with a warning saying why."""
    if os.environ.get("HETSCHED_NO_NATIVE", "") not in ("", "0"):
        return []
    if not (HERE / SOURCE).is_file():  # building from a tree without the source (nothing to compile)
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        _warn("mypyc is not installed in the build environment")
        return []
    text = (HERE / SOURCE).read_bytes()
    digest = hashlib.sha256(text).hexdigest()
    os.chdir(HERE)
    COPY.write_bytes(text + f'\n\nSOURCE_SHA256 = "{digest}"\n'.encode())
    # none of pyproject's mypy settings (its plugins need packages the build environment lacks); the rest
    # of hetsched is read for its types, third-party packages are not (reading numpy's and pydantic's
    # stubs took minutes), and they may be missing
    cfg = Path(tempfile.mkdtemp()) / "mypyc.ini"
    cfg.write_text("[mypy]\nfollow_imports = skip\nignore_missing_imports = true\n"
                   "[mypy-hetsched.*]\nfollow_imports = silent\n")
    try:
        extensions = mypycify(["--config-file", str(cfg), str(COPY)], opt_level="3")
    except (Exception, SystemExit) as err:  # mypyc exits on a type error
        _warn(f"mypyc failed: {err}")
        return []
    finally:
        COPY.unlink(missing_ok=True)
        cfg.unlink(missing_ok=True)
    for ext in extensions:
        ext.optional = True  # a C compiler's failure leaves the pure-Python kernel, not a failed install
    return extensions


setup(ext_modules=native_extensions())
