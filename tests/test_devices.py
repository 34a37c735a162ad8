"""How the real executors pick their devices and cores, and read their options (no processes run)."""

from __future__ import annotations

import pytest

from hetsched.exec import devices
from hetsched.exec.devices import describe_device, plan_cores, resolve_device
from hetsched.model import InputError
from hetsched.tools import Device, DeviceKind


def test_cores_are_split_between_the_cpu_pool_and_the_stand_in_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices, "available_cores", lambda: (0, 1, 2, 3))
    plan = plan_cores(2, None)
    assert (plan.cpu_cores, plan.device_cores, plan.device_threads, plan.shared) == ((0, 1), (2,), 1, False)
    plan = plan_cores(1, 3)
    assert (plan.cpu_cores, plan.device_cores) == ((0,), (1, 2, 3))
    plan = plan_cores(4, 1)  # no core left for the device: nothing is pinned, and the plan says so
    assert plan.shared and plan.cpu_cores is None and plan.device_cores is None
    assert not plan_cores(1, 1, pin=False).cpu_cores
    with pytest.raises(InputError, match="cpu threads must be >= 1, got 0"):
        plan_cores(0, None)
    with pytest.raises(InputError, match="stand-in device threads must be >= 1, got 0"):
        plan_cores(1, 0)


def test_device_choices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices, "cuda_device_count", lambda: 0)
    assert resolve_device("none", 1) is None
    assert resolve_device("standin", 2) == Device(DeviceKind.STANDIN, 0, 2)
    assert resolve_device("auto", 1) == Device(DeviceKind.STANDIN, 0, 1)  # no CUDA: the stand-in device
    with pytest.raises(InputError, match=r"device 'cuda': .*use device=standin"):
        resolve_device("cuda", 1)
    with pytest.raises(InputError, match=r"device 'tpu' is not known; accepted: auto, cuda, standin, none"):
        resolve_device("tpu", 1)
    monkeypatch.setattr(devices, "cuda_device_count", lambda: 2)
    assert resolve_device("auto", 1) == Device(DeviceKind.CUDA, 0, 1)
    assert resolve_device("cuda:1", 1) == Device(DeviceKind.CUDA, 1, 1)
    with pytest.raises(InputError, match=r"only 2 CUDA device\(s\)"):
        resolve_device("cuda:2", 1)
    with pytest.raises(InputError, match="write cuda or cuda:N"):
        resolve_device("cuda:x", 1)


def test_every_description_says_what_the_gpu_placements_run_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(devices, "available_cores", lambda: (0, 1))
    text = describe_device(Device(DeviceKind.STANDIN, 0, 1), plan_cores(1, 1))
    assert text.startswith("stand-in device") and "not a GPU" in text and "core(s) 1" in text
    assert "sharing the CPU pool's cores" in describe_device(Device(DeviceKind.STANDIN), plan_cores(2, 1))
    assert "refused" in describe_device(None)
    assert Device(DeviceKind.CUDA, 1).torch == "cuda:1" and Device(DeviceKind.STANDIN).torch == "cpu"
    assert Device(DeviceKind.STANDIN).acts_as_gpu and not Device(DeviceKind.CPU).acts_as_gpu


def test_executor_options_from_the_command_line() -> None:
    import typer

    from hetsched.cli.run import parse_executor_options

    assert parse_executor_options(["device=standin", "timeout_s=60", "check-memory=false",
                                   'tool_modules=["a.b"]']) == {"device": "standin", "timeout_s": 60,
                                                               "check_memory": False, "tool_modules": ["a.b"]}
    with pytest.raises(typer.Exit):
        parse_executor_options(["device"])
