"""The compiled contention kernel (``setup.py``'s mypyc build of ``hetsched/model/contention.py``): the same
results as the Python source bit for bit, and chosen only when it was built from that source."""

from __future__ import annotations

import hashlib
import importlib.util
import os
import pickle
import random
import sys
from collections.abc import Iterator
from dataclasses import fields, replace
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hetsched.bench.generate import FAMILIES, WorkflowSpec, random_scenario
from hetsched.model import Mode, contention

NATIVE = contention.KERNEL == "native"
if os.environ.get("CI") and not NATIVE:  # CI installs with the build hook: a skip there would hide a broken build
    raise AssertionError(f"CI runs the pure-Python contention kernel: {contention.KERNEL_NOTE}")
needs_native = pytest.mark.skipif(not NATIVE, reason=f"the compiled kernel does not run here: {contention.KERNEL_NOTE}")


@pytest.fixture(scope="module")
def pure() -> Iterator[ModuleType]:
    """The Python source of the kernel loaded as a module of its own (it keeps its own functions)."""
    name = "hetsched.model._contention_pure_for_tests"
    spec = importlib.util.spec_from_file_location(name, contention.__file__)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        del sys.modules[name]


def _same(a: Any, b: Any) -> bool:
    """Equal bit for bit, nan included (``repr`` of a float round-trips it exactly)."""
    return repr(a) == repr(b)


@needs_native
@settings(max_examples=80, deadline=None)
@given(family=st.sampled_from(FAMILIES), n=st.integers(2, 60), seed=st.integers(0, 10_000),
       pick=st.randoms(use_true_random=False), cross=st.sampled_from([0.0, 0.0, 0.3]),
       sharing=st.sampled_from([0, 0, 1, 2]), waits=st.booleans(), instances=st.integers(1, 3),
       warm_ms=st.sampled_from([0.0, 0.0, 500.0]))
def test_the_compiled_kernel_gives_the_sources_results_bit_for_bit(
        pure: ModuleType, family: str, n: int, seed: int, pick: random.Random, cross: float, sharing: int,
        waits: bool, instances: int, warm_ms: float) -> None:
    """Every field of the full simulation (timings, VRAM record, several instances) and the E2E entry are the
    same in the compiled kernel and in the Python source, on generated three-way workflows, random mappings,
    shared loads, cross-core interference, warm reuse and tasks that wait part of the time."""
    c = random_scenario(WorkflowSpec(family, n, Mode.THREE_WAY, seed)).compiled
    if waits:
        c = replace(c, demand=tuple(d if i % 3 else 0.4 for i, d in enumerate(c.demand)), waits=True)
    c = replace(c, cross=cross, load_sharing=sharing)
    if warm_ms:  # memory freed within warm_ms reused warm, the rest loaded cold (twice the warm load here)
        c = replace(c, warm_ms=warm_ms, load_cold_ms=tuple(2.0 * ms for ms in c.load_ms))
    p = pure.Compiled(*(getattr(c, f.name) for f in fields(c)))
    releases = tuple(pick.uniform(0.0, 2_000.0) if r else 0.0 for r in range(instances))
    for _ in range(3):
        codes = tuple(pick.choice(c.allowed[i]) for i in range(c.n))
        if not c.static_ok(codes):
            continue
        assert p.static_ok(codes)
        native_t = contention.simulate(c, codes, releases=releases, timings=True, record=True)
        pure_t = pure.simulate(p, codes, releases=releases, timings=True, record=True)
        for f in fields(pure_t):
            assert _same(getattr(native_t, f.name), getattr(pure_t, f.name)), f.name
        assert _same(contention.simulate_e2e(c, codes), pure.simulate_e2e(p, codes))


@needs_native
def test_the_compiled_classes_pickle_and_the_sources_functions_are_replaced() -> None:
    """The compiled scenario and its timings survive pickling (worker processes receive them), and every
    function and class the module defines runs compiled (none left in Python beside it)."""
    c = random_scenario(WorkflowSpec("layered", 20, Mode.THREE_WAY, 3)).compiled
    t = contention.simulate(c, (0,) * c.n, timings=True)
    assert pickle.loads(pickle.dumps(c)) == c
    assert pickle.loads(pickle.dumps(t)) == t
    assert type(c).__module__ == "hetsched.model._contention_native"
    defined = [o for o in vars(contention).values()
               if callable(o) and getattr(o, "__module__", "").startswith("hetsched.model.")
               and "contention" in getattr(o, "__module__", "")]
    assert defined and all(o.__module__ == "hetsched.model._contention_native" for o in defined
                           if getattr(o, "__name__", "") != "_native_kernel")


def test_a_build_of_another_source_or_the_switch_leaves_the_python(monkeypatch: pytest.MonkeyPatch) -> None:
    """The compiled copy runs only when its stamp is this source's SHA-256, and not when
    ``HETSCHED_PURE_PYTHON`` is set; a missing build leaves the Python, each with the reason."""
    digest = hashlib.sha256(Path(contention.__file__).read_bytes()).hexdigest()
    name = "hetsched.model._contention_native"
    monkeypatch.delenv("HETSCHED_PURE_PYTHON", raising=False)
    monkeypatch.setitem(sys.modules, name, SimpleNamespace(SOURCE_SHA256=digest, __file__="x.so"))
    module, why = contention._native_kernel()
    assert module is sys.modules[name] and "compiled" in why
    monkeypatch.setitem(sys.modules, name, SimpleNamespace(SOURCE_SHA256="0" * 64, __file__="x.so"))
    module, why = contention._native_kernel()
    assert module is None and "another version" in why
    monkeypatch.setitem(sys.modules, name, None)  # import fails: not built
    module, why = contention._native_kernel()
    assert module is None and "not compiled" in why
    monkeypatch.setitem(sys.modules, name, SimpleNamespace(SOURCE_SHA256=digest, __file__="x.so"))
    monkeypatch.setenv("HETSCHED_PURE_PYTHON", "1")
    module, why = contention._native_kernel()
    assert module is None and "HETSCHED_PURE_PYTHON" in why
