"""What this machine offers the real executors: its CPU cores (and how to split them between the
CPU pool and the stand-in device), whether CUDA is usable, and a description of each for traces,
CLI output and card provenance.

Imports the tool API's device type; torch only to ask about CUDA (and only when it is installed).
"""

from __future__ import annotations

import importlib.util
import os
import platform
import subprocess
from dataclasses import dataclass
from functools import cache

from hetsched.model import InputError
from hetsched.tools.base import Device, DeviceKind

DEVICE_CHOICES: tuple[str, ...] = ("auto", "cuda", "standin", "none")
"""``device`` option of the local executor and the profiler: auto (cuda when usable, else the
stand-in device), cuda (or ``cuda:N``), standin, none (GPU placements are refused)."""


DEFAULT_DEVICE_THREADS = 1
"""Threads of the stand-in device unless told otherwise (the executor's and the profiler's default)."""


def available_cores() -> tuple[int, ...]:
    """The CPU cores this process may run on."""
    try:
        return tuple(sorted(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return tuple(range(os.cpu_count() or 1))


@cache
def cpu_model() -> str:
    """The CPU's model name (``Intel(R) Xeon(R) ...``)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def torch_installed() -> bool:
    """Whether torch can be imported (without importing it)."""
    return importlib.util.find_spec("torch") is not None


@cache
def cuda_device_count() -> int:
    """CUDA devices torch can use (0 without torch or CUDA). Imports torch in this process."""
    if not torch_installed():
        return 0
    import torch

    try:
        return int(torch.cuda.device_count()) if torch.cuda.is_available() else 0
    except RuntimeError:  # a broken driver reads as "no CUDA"
        return 0


@cache
def gpu_description(index: int = 0) -> str:
    """``NVIDIA H100 80GB HBM3, driver 550.54, CUDA 12.4`` for a CUDA device."""
    import torch

    name = torch.cuda.get_device_name(index)
    parts = [name]
    driver = _nvidia_driver()
    if driver:
        parts.append(f"driver {driver}")
    if torch.version.cuda:
        parts.append(f"CUDA {torch.version.cuda}")
    return ", ".join(parts)


def _nvidia_driver() -> str:
    try:
        import pynvml

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:  # pynvml missing or NVML unusable: ask nvidia-smi, else say nothing
        try:
            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10, check=False)
            return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else ""
        except (OSError, subprocess.SubprocessError):
            return ""


@dataclass(frozen=True)
class CorePlan:
    """How the CPU pool and the stand-in device share the machine's cores."""

    cpu_threads: int
    """Threads of the CPU pool."""
    device_threads: int
    """Threads of the stand-in device (host threads of a CUDA device)."""
    cpu_cores: tuple[int, ...] | None
    """Cores the CPU pool is pinned to (None: not pinned)."""
    device_cores: tuple[int, ...] | None
    """Cores the stand-in device is pinned to (None: not pinned)."""
    available: int
    """Cores this process may use."""

    @property
    def shared(self) -> bool:
        """True when the CPU pool and the stand-in device could not get cores of their own."""
        return self.cpu_cores is None or self.device_cores is None


def plan_cores(cpu_threads: int, device_threads: int | None, pin: bool = True) -> CorePlan:
    """Split the available cores: the CPU pool gets the first ``cpu_threads``, the stand-in device
    the next ``device_threads`` (default 1: a fixed budget, so cards profiled on one machine hold on
    another). When there are not enough cores for both, nothing is pinned and the two share the
    cores (traces say so)."""
    cores = available_cores()
    if cpu_threads < 1:
        raise InputError(f"cpu threads must be >= 1, got {cpu_threads}")
    if device_threads is not None and device_threads < 1:
        raise InputError(f"stand-in device threads must be >= 1, got {device_threads}")
    dev = device_threads if device_threads is not None else DEFAULT_DEVICE_THREADS
    if pin and len(cores) >= cpu_threads + dev:
        return CorePlan(cpu_threads, dev, cores[:cpu_threads], cores[cpu_threads:cpu_threads + dev], len(cores))
    return CorePlan(cpu_threads, dev, None, None, len(cores))


def resolve_device(choice: str, threads: int) -> Device | None:
    """The device GPU placements run on for a ``device`` option, or None for ``none``.

    ``auto`` is CUDA when torch sees a GPU, else the stand-in device; ``cuda`` without a usable
    GPU is an InputError that says what is missing.
    """
    text = str(choice).strip().lower()
    if text == "none":
        return None
    if text == "standin":
        return Device(DeviceKind.STANDIN, 0, threads)
    if text == "auto":
        return Device(DeviceKind.CUDA, 0, threads) if cuda_device_count() > 0 else Device(DeviceKind.STANDIN, 0,
                                                                                           threads)
    if text == "cuda" or text.startswith("cuda:"):
        index = 0
        if ":" in text:
            try:
                index = int(text.split(":", 1)[1])
            except ValueError:
                raise InputError(f"device {choice!r}: write cuda or cuda:N") from None
        count = cuda_device_count()
        if count == 0:
            why = "torch is not installed" if not torch_installed() else "torch sees no CUDA device"
            raise InputError(f"device {choice!r}: {why}; use device=standin (the stand-in device) or device=none")
        if index >= count:
            raise InputError(f"device {choice!r}: only {count} CUDA device(s) (cuda:0..cuda:{count - 1})")
        return Device(DeviceKind.CUDA, index, threads)
    raise InputError(f"device {choice!r} is not known; accepted: {', '.join(DEVICE_CHOICES)} (or cuda:N)")


def describe_device(device: Device | None, plan: CorePlan | None = None) -> str:
    """One line on what GPU placements run on (for traces, CLI output and card provenance)."""
    if device is None:
        return "no GPU device (GPU placements are refused)"
    if device.kind is DeviceKind.CUDA:
        return f"CUDA device {device.index}: {gpu_description(device.index)}"
    where = ""
    if plan is not None and plan.device_cores is not None:
        where = f" pinned to core(s) {','.join(map(str, plan.device_cores))}"
    elif plan is not None:
        where = " sharing the CPU pool's cores"
    return (f"stand-in device: a worker process with {device.threads} thread(s) of {cpu_model()}{where}, "
            "not a GPU")


def describe_cpu(threads: int, plan: CorePlan | None = None) -> str:
    """One line on the CPU pool."""
    where = ""
    if plan is not None and plan.cpu_cores is not None:
        where = f", pinned to core(s) {','.join(map(str, plan.cpu_cores))}"
    return f"{cpu_model()}, {threads} thread(s){where}"
