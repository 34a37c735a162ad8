"""A real Ray cluster for the tests, on loopback.

Ray binds the machine's interface address, so its tests run in a network namespace that has only
loopback: :func:`namespace_command` wraps a command so that it runs as root in new network, PID
and mount namespaces (``unshare``), where the test's own folder is bind-mounted at ``/mnt`` (Ray's
socket paths must stay under 107 bytes) and every process started there dies with it.
:func:`start_cluster` starts a head (``ray start --head --block``) and worker nodes
(``ray start --block --address ...``) there, and :meth:`Cluster.stop` stops exactly those
processes, by their ids.

Used by tests/test_ray_cluster.py (outside) and tests/ray_cluster_suite.py (inside).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NS_ENV = "HETSCHED_RAY_NETNS"
"""Set (to 1) inside the namespace the suite runs in."""
NS_DIR = "/mnt"
"""Where the test's folder is bind-mounted inside the namespace."""


def namespace_unavailable() -> str | None:
    """Why the loopback namespace cannot be made here (None: it can)."""
    if sys.platform != "linux":
        return "the Ray cluster tests need Linux network namespaces"
    if os.geteuid() != 0:
        return "the Ray cluster tests need root to make a loopback-only network namespace (unshare -n)"
    for tool in ("unshare", "mount"):
        if shutil.which(tool) is None:
            return f"the Ray cluster tests need util-linux's {tool!r}, which is not installed"
    probe = subprocess.run(["unshare", "--net", "--pid", "--fork", "--mount-proc", "true"], capture_output=True,
                           text=True, check=False, timeout=60)
    if probe.returncode != 0:
        return f"unshare is not permitted here: {probe.stderr.strip() or probe.returncode}"
    return None


def namespace_command(folder: Path, argv: list[str]) -> list[str]:
    """``argv`` run in new network, PID and mount namespaces with ``folder`` at /mnt."""
    inner = 'mount --bind "$0" ' + NS_DIR + ' && exec "$@"'
    return ["unshare", "--net", "--pid", "--fork", "--mount-proc", "sh", "-c", inner, str(folder), *argv]


def loopback_up() -> None:
    """Bring ``lo`` up (a new network namespace starts with it down); needs no iproute2."""
    siocgifflags, siocsifflags, iff_up = 0x8913, 0x8914, 0x1
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        flags = struct.unpack("16sH", fcntl.ioctl(s, siocgifflags, struct.pack("16sH", b"lo", 0)))[1]
        fcntl.ioctl(s, siocsifflags, struct.pack("16sH", b"lo", flags | iff_up))


def only_loopback() -> bool:
    """True when this process sees no network interface but ``lo``."""
    return [name for _, name in socket.if_nameindex()] == ["lo"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Cluster:
    """A head and worker nodes started by :func:`start_cluster`."""

    address: str
    """``127.0.0.1:PORT`` of the head."""
    temp_dir: Path
    """Ray's temp dir (sessions, logs)."""
    env: dict[str, str]
    """The environment the nodes run with (and a driver needs: the auth token)."""
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    """``head``, ``worker1``...: the ``ray start --block`` processes (each leads its own process group)."""

    def stop(self, name: str | None = None) -> None:
        """Stop one node (or all): SIGTERM to its ``ray start --block`` process, which stops the
        processes it started; any of them still alive after that is killed, by process id."""
        for key in [name] if name else list(self.processes):
            proc = self.processes.pop(key)
            started = descendants(proc.pid)
            with contextlib.suppress(ProcessLookupError):
                os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
            _kill(started)

    def kill(self, name: str) -> None:
        """Kill one node abruptly (as when its machine dies): SIGKILL to its ``ray start`` process and
        every process it started, by process id."""
        proc = self.processes[name]
        _kill({proc.pid, *descendants(proc.pid)})

    def wait_joined(self, timeout_s: float = 180.0) -> None:
        """Wait until every node of the cluster is alive in Ray's node table (a worker node joins some
        seconds after its ``ray start``, more on a loaded machine): one driver process polls
        ``ray.nodes()`` for at most ``timeout_s``. Fails saying which nodes joined, with the log of
        any node whose ``ray start`` exited."""
        want = len(self.processes)
        argv = [sys.executable, "-c", _WAIT_JOINED, self.address, str(want), str(timeout_s)]
        try:
            proc = subprocess.run(argv, capture_output=True, text=True, env=self.env, timeout=timeout_s + 120,
                                  check=False)
            joined, rc = (proc.stdout.strip().splitlines() or ["[]"])[-1], proc.returncode
            detail = proc.stderr[-2000:]
        except subprocess.TimeoutExpired:
            joined, rc, detail = "unknown", -1, f"the waiting driver did not end within {timeout_s + 120:g} s"
        if rc == 0:
            return
        exited = {name: p.returncode for name, p in self.processes.items() if p.poll() is not None}
        logs = "".join(f"\n--- {name}.log:\n{(self.temp_dir.parent / f'{name}.log').read_text(errors='replace')[-2000:]}"
                       for name in exited)
        raise RuntimeError(f"{want} Ray nodes were started but within {timeout_s:g} s only these joined (their "
                           f"resources): {joined}; ray start exited: {exited or 'none'}; driver: {detail}{logs}")

    def pids(self) -> set[int]:
        """Every live process whose command line names this cluster's temp dir."""
        marker = str(self.temp_dir).encode()
        found = set()
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                with contextlib.suppress(OSError):
                    if marker in (entry / "cmdline").read_bytes():
                        found.add(int(entry.name))
        return found


_WAIT_JOINED = """
import json, sys, time
import ray
address, want, timeout_s = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
deadline = time.monotonic() + timeout_s
ray.init(address=address, logging_level="ERROR", log_to_driver=False)
while True:
    alive = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    if len(alive) >= want:
        sys.exit(0)
    if time.monotonic() > deadline:
        print(json.dumps(alive))
        sys.exit(3)
    time.sleep(0.5)
"""
"""A driver that waits until ``want`` nodes are alive (:meth:`Cluster.wait_joined`)."""


def descendants(pid: int) -> set[int]:
    """Every live process descended from ``pid`` (from /proc; Ray starts its daemons in new sessions,
    so a process group does not hold them)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
                children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for kid in children.get(todo.pop(), []):
            if kid not in found:
                found.add(kid)
                todo.append(kid)
    return found


def _kill(pids: set[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def cluster_env(extra_pythonpath: list[str] | None = None) -> dict[str, str]:
    """The environment of the test cluster's nodes and drivers: token auth with the driver's token
    (else a fresh one; never a file in ~/.ray), no usage stats, idle workers kept warm at the nodes'
    priority, task events flushed every 100 ms."""
    env = dict(os.environ)
    paths = [str(ROOT / "src"), str(ROOT), *(extra_pythonpath or [])]
    env.update({
        "PYTHONPATH": os.pathsep.join([*paths, env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": env.get("RAY_AUTH_TOKEN") or uuid.uuid4().hex,
        "RAY_USAGE_STATS_ENABLED": "0",
        "RAY_num_workers_soft_limit": "32",
        "RAY_idle_worker_killing_time_threshold_ms": "600000",
        "RAY_task_events_report_interval_ms": "100",
        # workers at the nodes' priority, as in a local cluster the executor starts (Ray's default, nice 15,
        # starves them behind every other process of a loaded CI machine)
        "RAY_worker_niceness": "0",
        # a dead node is declared dead within seconds, not Ray's default of about a minute
        "RAY_health_check_period_ms": "1000",
        "RAY_health_check_timeout_ms": "1000",
        "RAY_health_check_failure_threshold": "3",
    })
    return env


def _wait_port(port: int, proc: subprocess.Popen[bytes], log: Path, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"ray start exited with {proc.returncode}: {log.read_text(errors='replace')[-3000:]}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.2)
    raise RuntimeError(f"the Ray head did not open port {port} within {timeout_s:g} s")


def start_cluster(folder: Path, *, head: dict[str, object], workers: list[dict[str, object]]) -> Cluster:
    """Start a head and worker nodes (each a ``ray start --block`` in its own process group) with
    their temp dir and logs under ``folder``. Node specs: ``num_cpus``, ``num_gpus``, ``resources``."""
    temp_dir = folder / "ray"
    temp_dir.mkdir(parents=True, exist_ok=True)
    env = cluster_env()
    port, dash = free_port(), free_port()
    cluster = Cluster(address=f"127.0.0.1:{port}", temp_dir=temp_dir, env=env)

    def args(spec: dict[str, object]) -> list[str]:
        out = ["--num-cpus", str(spec.get("num_cpus", 0)), "--num-gpus", str(spec.get("num_gpus", 0))]
        if spec.get("resources"):
            out += ["--resources", json.dumps(spec["resources"])]
        return out

    def launch(name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        log = folder / f"{name}.log"
        with log.open("wb") as sink:
            proc = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        cluster.processes[name] = proc
        return proc

    ray_bin = str(Path(sys.executable).with_name("ray"))
    common = ["--block", "--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    proc = launch("head", [ray_bin, "start", "--head", "--port", str(port), "--dashboard-port", str(dash),
                           "--temp-dir", str(temp_dir), *common, *args(head)])
    try:
        _wait_port(port, proc, folder / "head.log")
        for i, spec in enumerate(workers, start=1):
            launch(f"worker{i}", [ray_bin, "start", "--address", cluster.address, *common, *args(spec)])
    except BaseException:
        cluster.stop()
        raise
    return cluster
