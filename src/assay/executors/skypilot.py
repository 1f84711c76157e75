"""The SkyPilot executor: a pool of cloud nodes, provisioned once, that runs a Ray cluster.

``assay run`` with ``executor = "skypilot"`` launches the pool before the first block: one
SkyPilot cluster per node (``<name>-head``, ``<name>-w1`` ...), each a single VM (or pod)
with the requested accelerators. The head starts a Ray head, every worker joins it, and
each node declares ``slots_per_node`` units of the benchmark-slot resource. Blocks then go
through :class:`~assay.executors.ray.RayExecutor`, connected to the pool: never one VM per
experiment. When the run ends the pool is torn down (``sky down``) unless ``down = false``.

One cluster per node, rather than one multi-node cluster, is what lets a single node be
replaced: when the loop quarantines a slot (its A/A noise is far above its peers'), the
node's cluster is taken down and a fresh worker is launched in its place. The head cannot
be replaced without losing the Ray cluster: its slots are only quarantined.

Provisioning sits behind :class:`Launcher` (``launch(name, node)``, ``down(name)``,
``status()``): :class:`SkyPilotLauncher` is the real one; :class:`LocalLauncher` starts
local Ray node processes with the same interface, for tests and for trying a pool on one
machine.

``[executor.skypilot]`` keys::

    name = "assay"              # cluster name prefix
    nodes = 2                   # pool size, head included
    accelerators = "A100:1"     # SkyPilot accelerator spec ("" for CPU nodes)
    slots_per_node = 0          # 0: one per accelerator (1 for CPU nodes)
    cloud = "aws"               # aws, gcp, kubernetes ... ("" lets SkyPilot choose)
    region = ""                 # also: zone, instance_type, cpus, memory, image_id
    disk_size = 0               # GB, 0: SkyPilot's default
    use_spot = false
    setup = "pip install 'assay[ray]'"   # runs once per node before Ray starts
    ray_port = 6379             # must differ from SkyPilot's own Ray (6380)
    client_port = 10001         # Ray client port the driver connects to
    address = ""                # driver's Ray address; "" = ray://<head ip>:<client_port>
    down = true                 # tear the pool down when the run ends
    replace_quarantined = true
    retry_until_up = false
    autostop_minutes = 0        # >0: SkyPilot tears a node down after this idle time

Block resources (``num_cpus``, ``num_gpus``, ``cache_dir`` ...) come from
``[executor.ray]``; its ``address`` and ``min_slots`` are set by the pool.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config.spec import PlatformSpec, Target
from ..errors import ExecutorError, require
from ..model import Block, BlockResult, Slot
from ..repo.workspace import Workspace
from .base import Executor
from .ray import SLOT_RESOURCE, RayConfig, RayExecutor

CLUSTER_LABEL = "assay-cluster"


@dataclass(frozen=True)
class SkyConfig:
    name: str = "assay"
    nodes: int = 2
    accelerators: str = ""
    slots_per_node: int = 0
    cloud: str = ""
    region: str = ""
    zone: str = ""
    instance_type: str = ""
    cpus: str = ""
    memory: str = ""
    image_id: str = ""
    disk_size: int = 0
    use_spot: bool = False
    setup: str = "pip install 'assay[ray]'"
    ray_port: int = 6379
    client_port: int = 10001
    address: str = ""
    down: bool = True
    replace_quarantined: bool = True
    retry_until_up: bool = False
    autostop_minutes: int = 0
    slot_resource: str = SLOT_RESOURCE

    @property
    def node_slots(self) -> int:
        if self.slots_per_node:
            return self.slots_per_node
        if ":" in self.accelerators:
            try:
                return max(1, int(float(self.accelerators.rsplit(":", 1)[1])))
            except ValueError:
                return 1
        return 1

    @classmethod
    def from_target(cls, target: Target) -> SkyConfig:
        sec = target.section("executor.skypilot")

        def text(key: str) -> str:
            v = sec.get(key, (str, int, float), "")
            return str(v)

        name = sec.get("name", str, "assay")
        if not name or not all(c.isalnum() or c == "-" for c in name) or not name[0].isalpha():
            raise sec.error("name", f"{name!r} is not a valid cluster name prefix",
                            "letters, digits and dashes, starting with a letter")
        ray_slot = target.section("executor.ray").get("slot_resource", str, SLOT_RESOURCE)
        cfg = cls(
            name=name,
            nodes=sec.number("nodes", 2, low=1, high=512, integer=True),
            accelerators=sec.get("accelerators", str, ""),
            slots_per_node=sec.number("slots_per_node", 0, low=0, high=64, integer=True),
            cloud=sec.get("cloud", str, ""),
            region=sec.get("region", str, ""),
            zone=sec.get("zone", str, ""),
            instance_type=sec.get("instance_type", str, ""),
            cpus=text("cpus"),
            memory=text("memory"),
            image_id=sec.get("image_id", str, ""),
            disk_size=sec.number("disk_size", 0, low=0, integer=True),
            use_spot=sec.get("use_spot", bool, False),
            setup=sec.get("setup", str, cls.setup),
            ray_port=sec.number("ray_port", 6379, low=1, high=65535, integer=True),
            client_port=sec.number("client_port", 10001, low=1, high=65535, integer=True),
            address=sec.get("address", str, ""),
            down=sec.get("down", bool, True),
            replace_quarantined=sec.get("replace_quarantined", bool, True),
            retry_until_up=sec.get("retry_until_up", bool, False),
            autostop_minutes=sec.number("autostop_minutes", 0, low=0, integer=True),
            slot_resource=ray_slot,
        )
        if cfg.ray_port == 6380:
            raise sec.error("ray_port", "6380 is SkyPilot's own Ray port", "e.g. 6379")
        sec.reject_unknown()
        return cfg


def platform_pool(target: Target, platform: PlatformSpec) -> SkyConfig:
    """The pool of one ``[[platforms]]`` entry: ``[executor.skypilot]`` with its keys over it.

    Its nodes advertise a slot resource of their own (``assay_slot_<platform>``), so that a
    block for this platform can only land on this pool's nodes.
    """
    base = SkyConfig.from_target(target)
    fields = {f.name: f for f in dataclasses.fields(SkyConfig)}
    values: dict[str, Any] = {}
    for key, value in platform.sky.items():
        default = fields[key].default
        values[key] = str(value) if isinstance(default, str) else value
    return dataclasses.replace(base, name=f"{base.name}-{platform.name}".replace("_", "-"),
                               slot_resource=f"{SLOT_RESOURCE}_{platform.name}", **values)


@dataclass(frozen=True)
class NodeSpec:
    """What one pool node runs: a Ray head, or a worker joining ``head_address``."""

    role: str  # "head" | "worker"
    slots: int
    head_address: str = ""  # ip:port of the Ray head, for workers
    cloud: str = ""  # for workers: the head's cloud and region, where the pool left them open
    region: str = ""


@dataclass(frozen=True)
class ClusterInfo:
    name: str
    status: str  # "UP", "INIT", "STOPPED", "DOWN"
    ray_address: str = ""  # where workers join (heads only)
    driver_address: str = ""  # where the driver connects (heads only)
    cloud: str = ""  # where SkyPilot placed it ('' when unknown)
    region: str = ""


class Launcher(ABC):
    """Provisions pool nodes; one named cluster per node."""

    @abstractmethod
    def launch(self, name: str, node: NodeSpec) -> ClusterInfo:
        """Start (or reuse) cluster ``name`` running ``node``; returns when it is up."""

    @abstractmethod
    def down(self, name: str) -> None:
        """Tear cluster ``name`` down; a missing cluster is not an error."""

    @abstractmethod
    def status(self) -> dict[str, ClusterInfo]:
        """The clusters this launcher started and still knows about."""

    def close(self) -> None:  # noqa: B027 - optional
        """Release what the launcher itself holds (not the clusters)."""


# -- the real launcher ---------------------------------------------------------------------


def node_start_script(cfg: SkyConfig) -> str:
    """The ``run`` section: start Ray on this node (head or worker) and return.

    Launching an existing cluster again (``down = false`` on an earlier run) finds Ray
    already running: the script then leaves it as it is.
    """
    labels = f'--labels "{CLUSTER_LABEL}=$ASSAY_CLUSTER"'
    return "\n".join([
        "set -e",
        f'RES="$(printf \'{{"{cfg.slot_resource}": %s}}\' "$ASSAY_SLOTS")"',
        'if [ "$ASSAY_ROLE" = head ]; then',
        f"  if ray status --address 127.0.0.1:{cfg.ray_port} >/dev/null 2>&1; then exit 0; fi",
        f"  ray start --head --port {cfg.ray_port} --ray-client-server-port {cfg.client_port} "
        f'--resources "$RES" {labels} --disable-usage-stats',
        "else",
        '  if [ -f ~/.assay-ray-joined ] && [ "$(cat ~/.assay-ray-joined)" = "$ASSAY_HEAD" ] '
        '&& ray status --address "$ASSAY_HEAD" >/dev/null 2>&1; then exit 0; fi',
        f'  ray start --address "$ASSAY_HEAD" --resources "$RES" {labels} '
        "--disable-usage-stats",
        '  echo "$ASSAY_HEAD" > ~/.assay-ray-joined',
        "fi",
    ])


def task_config(cfg: SkyConfig, name: str, node: NodeSpec) -> dict[str, Any]:
    """The SkyPilot task (as its YAML mapping) for one pool node."""
    resources: dict[str, Any] = {}
    for key in ("accelerators", "cloud", "region", "zone", "instance_type", "cpus", "memory",
                "image_id"):
        value = getattr(cfg, key) or getattr(node, key, "")  # a worker goes where its head is
        if value:
            resources[key] = value
    if cfg.disk_size:
        resources["disk_size"] = cfg.disk_size
    if cfg.use_spot:
        resources["use_spot"] = True
    if node.role == "head":
        resources["ports"] = [cfg.client_port]
    envs = {"ASSAY_ROLE": node.role, "ASSAY_SLOTS": str(node.slots), "ASSAY_CLUSTER": name,
            "ASSAY_HEAD": node.head_address, "RAY_USAGE_STATS_ENABLED": "0"}
    return {"name": name, "resources": resources, "envs": envs,
            "setup": cfg.setup, "run": node_start_script(cfg)}


def build_task(cfg: SkyConfig, name: str, node: NodeSpec) -> Any:
    """A validated ``sky.Task`` (validation is offline: no cloud call)."""
    sky: Any = require("sky", "sky", "The SkyPilot executor")
    try:
        return sky.Task.from_yaml_config(task_config(cfg, name, node))
    except Exception as exc:
        raise ExecutorError(f"[executor.skypilot] does not make a valid SkyPilot task: "
                            f"{exc}") from exc


class SkyPilotLauncher(Launcher):
    def __init__(self, cfg: SkyConfig) -> None:
        self.cfg = cfg
        self.sky: Any = require("sky", "sky", "The SkyPilot executor")
        self._known: dict[str, ClusterInfo] = {}

    def launch(self, name: str, node: NodeSpec) -> ClusterInfo:
        sky = self.sky
        task = build_task(self.cfg, name, node)
        kwargs: dict[str, Any] = {"cluster_name": name, "retry_until_up": self.cfg.retry_until_up}
        if self.cfg.autostop_minutes:
            kwargs.update(idle_minutes_to_autostop=self.cfg.autostop_minutes, down=True)
        _, handle = sky.stream_and_get(sky.launch(task, **kwargs))
        placed = getattr(handle, "launched_resources", None)
        internal = list(getattr(handle, "cached_internal_ips", None) or [])
        external = list(getattr(handle, "cached_external_ips", None) or [])
        head_ip = getattr(handle, "head_ip", None) or (external[0] if external else "")
        inner = internal[0] if internal else head_ip
        info = ClusterInfo(name, "UP",
                           ray_address=f"{inner}:{self.cfg.ray_port}",
                           driver_address=self.cfg.address or
                           f"ray://{head_ip}:{self.cfg.client_port}",
                           cloud=str(getattr(placed, "cloud", None) or "").lower(),
                           region=str(getattr(placed, "region", None) or ""))
        self._known[name] = info
        return info

    def down(self, name: str) -> None:
        sky = self.sky
        try:
            sky.stream_and_get(sky.down(name))
        except Exception as exc:
            if "does not exist" not in str(exc) and "not found" not in str(exc).lower():
                raise
        self._known.pop(name, None)

    def status(self) -> dict[str, ClusterInfo]:
        if not self._known:
            return {}
        sky = self.sky
        records = sky.get(sky.status(list(self._known)))
        out: dict[str, ClusterInfo] = {}
        for rec in records:
            name = rec["name"]
            status = getattr(rec["status"], "value", str(rec["status"]))
            known = self._known.get(name, ClusterInfo(name, status))
            out[name] = dataclasses.replace(known, status=str(status))
        for name in self._known:
            out.setdefault(name, dataclasses.replace(self._known[name], status="DOWN"))
        return out


# -- the local launcher --------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class LocalLauncher(Launcher):
    """Each "cluster" is a local ``ray start --block`` process group (tests, dry runs)."""

    def __init__(self, cfg: SkyConfig, num_cpus: int = 1, env: dict[str, str] | None = None,
                 start_timeout_s: float = 90.0) -> None:
        self.cfg = cfg
        self.num_cpus = num_cpus
        self.env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **(env or {})}
        self.start_timeout_s = start_timeout_s
        self.temp = Path(tempfile.mkdtemp(prefix="asky"))
        self._procs: dict[str, subprocess.Popen[bytes]] = {}
        self._info: dict[str, ClusterInfo] = {}
        self._lock = threading.Lock()
        self.launched: list[str] = []  # every launch, in order
        self.downed: list[str] = []

    def _ray(self) -> str:
        exe = Path(sys.executable).parent / "ray"
        return str(exe) if exe.exists() else (shutil.which("ray") or "ray")

    def launch(self, name: str, node: NodeSpec) -> ClusterInfo:
        with self._lock:
            if name in self._procs and self._procs[name].poll() is None:
                return self._info[name]
        attempts = 2 if node.role == "head" else 1
        for attempt in range(1, attempts + 1):
            proc, port = self._start(name, node, attempt)
            if node.role != "head":
                info = ClusterInfo(name, "UP")
                break
            try:
                self._wait_port(port, proc, name)
            except ExecutorError:
                # A head that exits while starting on a busy machine (a port taken between
                # choosing and binding it, a start-up deadline inside Ray) gets one more
                # try on a fresh port and temp dir; the second failure is reported.
                kill_process_tree(proc.pid)
                if attempt == attempts:
                    raise
                continue
            addr = f"127.0.0.1:{port}"
            info = ClusterInfo(name, "UP", ray_address=addr, driver_address=addr)
            break
        with self._lock:
            self._procs[name] = proc
            self._info[name] = info
            self.launched.append(name)
        return info

    def _start(self, name: str, node: NodeSpec, attempt: int
               ) -> tuple[subprocess.Popen[bytes], int]:
        """One ``ray start`` of a node, and its port (0 for a worker node)."""
        res = json.dumps({self.cfg.slot_resource: node.slots})
        labels = f"{CLUSTER_LABEL}={name}"
        cmd = [self._ray(), "start", "--block", "--node-ip-address", "127.0.0.1",
               "--num-cpus", str(self.num_cpus), "--resources", res, "--labels", labels,
               "--object-store-memory", str(80 * 1024 * 1024), "--disable-usage-stats"]
        port = 0
        if node.role == "head":
            port = _free_port()
            cmd += ["--head", "--port", str(port), "--temp-dir", str(self.temp / f"t{attempt}"),
                    "--include-dashboard", "false"]
        else:
            cmd += ["--address", node.head_address]
        with open(self.temp / f"{name}.log", "ab") as log:
            log.write(f"--- attempt {attempt}: {' '.join(cmd)}\n".encode())
            log.flush()
            proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True, env=self.env)
        return proc, port

    def _wait_port(self, port: int, proc: subprocess.Popen[bytes], name: str) -> None:
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise ExecutorError(f"local node {name} exited while starting (exit "
                                    f"{proc.returncode}; its log {self.temp / name}.log ends: "
                                    f"{self._log_tail(name)})")
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    return
            time.sleep(0.2)
        raise ExecutorError(f"local node {name} did not start in {self.start_timeout_s:g}s "
                            f"(its log {self.temp / name}.log ends: {self._log_tail(name)})")

    def _log_tail(self, name: str, lines: int = 3) -> str:
        """The last lines of a node's log on one line (the log's folder is temporary)."""
        try:
            text = (self.temp / f"{name}.log").read_text(errors="replace")
        except OSError:
            return "(no log)"
        return " | ".join(ln.strip() for ln in text.strip().splitlines()[-lines:]) or "(empty)"

    def down(self, name: str) -> None:
        with self._lock:
            proc = self._procs.pop(name, None)
            self._info.pop(name, None)
        if proc is None:
            return
        kill_process_tree(proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=10)
        self.downed.append(name)

    def status(self) -> dict[str, ClusterInfo]:
        with self._lock:
            return {n: (self._info[n] if p.poll() is None else
                        dataclasses.replace(self._info[n], status="DOWN"))
                    for n, p in self._procs.items()}

    def close(self) -> None:
        for name in list(self._procs):
            self.down(name)
        shutil.rmtree(self.temp, ignore_errors=True)


def kill_process_tree(pid: int) -> None:
    """SIGKILL a process group and every descendant (Ray workers start their own groups)."""
    psutil: Any = require("psutil", "sky", "The SkyPilot executor")
    children: list[int] = []
    with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):  # already gone
        children = [p.pid for p in psutil.Process(pid).children(recursive=True)]
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    for child in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(child, signal.SIGKILL)


# -- the executor --------------------------------------------------------------------------


class SkyPilotExecutor(Executor):
    name = "skypilot"

    def __init__(self, target: Target, workspace: Workspace, cfg: SkyConfig,
                 launcher: Launcher, ray_cfg: RayConfig | None = None,
                 join: SkyPilotExecutor | None = None) -> None:
        """``join``: another pool whose Ray head this pool's nodes join (all of them
        workers), so that the pools of several platforms form one cluster."""
        self.target = target
        self.ws = workspace
        self.cfg = cfg
        self.launcher = launcher
        self.ray_cfg = ray_cfg or RayConfig.from_target(target)
        self.joined = join
        self.head = "" if join is not None else f"{cfg.name}-head"
        self.workers: list[str] = []
        self._next = 1
        self._replacing: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()
        self._head: ClusterInfo | None = None
        self.ray: RayExecutor | None = None
        self.events: list[str] = []  # what the pool did, in words
        self._closed = False
        try:
            self._provision()
        except BaseException:
            self._teardown()
            raise

    @classmethod
    def from_target(cls, target: Target, ws: Workspace) -> SkyPilotExecutor:
        cfg = SkyConfig.from_target(target)
        return cls(target, ws, cfg, SkyPilotLauncher(cfg))

    # -- the pool ----------------------------------------------------------------------
    def _worker_name(self) -> str:
        with self._lock:
            name = f"{self.cfg.name}-w{self._next}"
            self._next += 1
            return name

    def _provision(self) -> None:
        slots = self.cfg.node_slots
        if self.joined is not None:
            self._head = self.joined._head
            if self._head is None:
                raise ExecutorError(f"pool {self.cfg.name} joins pool {self.joined.cfg.name}, "
                                    "whose head is not up")
            names = [self._worker_name() for _ in range(self.cfg.nodes)]
        else:
            self._head = self.launcher.launch(self.head, NodeSpec("head", slots))
            self.events.append(f"launched {self.head}")
            names = [self._worker_name() for _ in range(self.cfg.nodes - 1)]
        if names:
            spec = self._worker_spec()
            with ThreadPoolExecutor(max_workers=min(8, len(names))) as pool:
                list(pool.map(lambda n: self.launcher.launch(n, spec), names))
            self.workers.extend(names)
            self.events.extend(f"launched {n}" for n in names)
        ray: Any = require("ray", "ray", "The SkyPilot executor")
        if ray.is_initialized() and self.joined is None:
            ray.shutdown()  # a driver talks to one cluster: this pool's
        rcfg = dataclasses.replace(self.ray_cfg, address=self._head.driver_address,
                                   min_slots=self.cfg.nodes * slots)
        self.ray = RayExecutor(self.target, self.ws, rcfg)

    def _worker_spec(self) -> NodeSpec:
        """A worker of this pool: joins the head, in the head's cloud and region unless the
        pool names its own (its nodes must reach the head's private address)."""
        assert self._head is not None
        open_region = not (self.cfg.region or self.cfg.zone)
        return NodeSpec("worker", self.cfg.node_slots, self._head.ray_address,
                        cloud="" if self.cfg.cloud else self._head.cloud,
                        region=self._head.region if open_region else "")

    def _cluster_of(self, slot: str) -> str | None:
        assert self.ray is not None
        return self.ray.node_label(slot, CLUSTER_LABEL)

    def replace(self, cluster: str) -> threading.Thread | None:
        """Take a worker node down and launch a fresh one in its place (in the background)."""
        if cluster == self.head or cluster not in self.workers:
            return None
        with self._lock:
            if cluster in self._replacing:
                return self._replacing[cluster]
        spec = self._worker_spec()
        new = self._worker_name()

        def work() -> None:
            self.launcher.down(cluster)
            self.events.append(f"down {cluster}")
            self.launcher.launch(new, spec)
            self.events.append(f"launched {new} to replace {cluster}")
            with self._lock:
                self.workers = [w for w in self.workers if w != cluster] + [new]

        thread = threading.Thread(target=work, name=f"assay-replace-{cluster}", daemon=True)
        with self._lock:
            self._replacing[cluster] = thread
        thread.start()
        return thread

    # -- the executor contract ---------------------------------------------------------
    def _exec(self) -> RayExecutor:
        if self.ray is None:
            raise ExecutorError("the SkyPilot pool is not up")
        return self.ray

    @property
    def slots(self) -> Sequence[Slot]:
        return self._exec().slots

    def free_slot_names(self) -> list[str]:
        return self._exec().free_slot_names()

    def quarantine(self, slot: str) -> None:
        ex = self._exec()
        cluster = self._cluster_of(slot)
        ex.quarantine(slot)
        if cluster is None or not self.cfg.replace_quarantined:
            return
        if cluster == self.head:
            self.events.append(f"{slot} quarantined on the head node: not replaced")
            return
        node = ex.node_of(slot)
        for other in ex.node_slots(node) if node else []:
            ex.quarantine(other)
        self.replace(cluster)

    def submit(self, block: Block) -> str:
        return self._exec().submit(block)

    def wait(self, timeout: float | None = None) -> list[BlockResult]:
        return self._exec().wait(timeout)

    def running(self) -> set[str]:
        return self._exec().running()

    def cancel(self, block_id: str) -> None:
        self._exec().cancel(block_id)

    def close(self) -> None:
        """Cancel what runs and tear the pool down (once; later calls do nothing)."""
        if self._closed:
            return
        try:
            if self.ray is not None:
                self.ray.close()
        finally:
            self._teardown()

    def _teardown(self) -> None:
        self._closed = True
        for thread in list(self._replacing.values()):
            thread.join(timeout=600)
        ray: Any = require("ray", "ray", "The SkyPilot executor")
        if ray.is_initialized() and self.joined is None:
            ray.shutdown()  # a joined pool leaves the cluster to the pool that holds the head
        if self.cfg.down:
            names = [*self.launcher.status()] or [n for n in (self.head, *self.workers) if n]
            with ThreadPoolExecutor(max_workers=max(1, min(8, len(names)))) as pool:
                list(pool.map(self.launcher.down, names))
            self.events.extend(f"down {n}" for n in names)
        self.launcher.close()
