"""The bubblewrap launcher: each container in a sandbox of its own (``--sandbox bwrap``).

A sandbox is one ``bwrap`` process and the PID namespace it creates, whose init (pid 1)
is the container itself (``--as-pid-1``: no other process of the sandbox holds its
stdin, stdout or stderr): the system and Python files read-only, a size-limited tmpfs
at ``/tmp`` and one at ``/dev/shm`` (the rest of ``/dev`` read-only), a cleared
environment, no capabilities, a network of its own (``isolated`` and ``sealed``: a
pasta process of the turn connects it, :mod:`.network`; ``isolated`` refuses the
non-public ranges, :mod:`.egress`), the host's or none, resource limits per sandbox
(:mod:`.limits`).
What it sees and what not: docs/architecture.md, ``--sandbox bwrap``.

Cancellation of :meth:`BwrapLauncher.run` ``SIGKILL``-s the namespace's init, which ends
every process in it; ``run`` returns once they are all gone, and its pasta too. A sandbox
that cannot start (or whose network cannot be connected) raises :class:`LaunchError`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Final

import trio

from sandstream.core import HEAP_TUNABLES

from .binding import WARM_FLAG, Binding, Claim
from .egress import AddressRange, Opening, openings, refuse_ranges
from .errors import LaunchError
from .huge_pages import THP_SETTING
from .launcher import (
    DEFAULT_CONTAINER_ARGV,
    STDERR_TARGETS,
    ContainerExit,
    ContainerHandle,
    StderrMode,
    container_heap_env,
    feed_bound,
    grow_pipe,
    log_stderr,
)
from .limits import (
    CgroupMeter,
    CgroupRoot,
    LimitExceeded,
    Meter,
    ProcMeter,
    ResourceLimits,
    exceeded,
    find_cgroup_root,
    watch_limits,
)
from .network import (
    PASTA_NETWORKS,
    Endpoint,
    NetworkMode,
    dispatch_endpoints,
    forwarded_ports,
    is_forward_address,
    start_pasta,
    stop_pasta,
)
from .procs import TURN_MARKER_ENV, close_pidfd, open_pidfd, signal_group
from .spawn import SpawnedProcess, spawn

__all__ = [
    "SANDBOX_SHM",
    "SANDBOX_TMP",
    "BwrapContainer",
    "BwrapLauncher",
    "bwrap_available",
    "python_paths",
]

SANDBOX_TMP: Final = "/tmp"
"""The sandbox's writable place: home, ``TMPDIR`` and the container's work dir."""
SANDBOX_SHM: Final = "/dev/shm"
"""Where POSIX shared memory lives (``shm_open``): a tmpfs sharing the disk limit."""

SYSTEM_DIRS: Final = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
ETC_ENTRIES: Final = (
    "alternatives",
    "ca-certificates",
    "ca-certificates.conf",
    "gai.conf",
    "group",
    "host.conf",
    "hosts",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "localtime",
    "mime.types",
    "nsswitch.conf",
    "os-release",
    "passwd",
    "pki",
    "protocols",
    "resolv.conf",
    "services",
    "ssl",
    "timezone",
)
"""What of ``/etc`` a sandbox sees (read-only): no shadow, no keys but public CAs."""

THP_SETTINGS_DIR: Final = os.path.dirname(THP_SETTING)
"""The host's transparent huge page settings, read-only in a sandbox whose container
is started with the heap tunables (glibc reads them)."""

_STARTUP_TIMEOUT: Final = 10.0
_DIRECT_KILLS: Final = 64
"""Children of the init killed one by one at teardown; the kernel kills the rest."""
_TEARDOWN_PRIORITY: Final = 1
"""The ``SCHED_FIFO`` priority killed sandbox processes exit at (the lowest)."""
_DRAIN_STDERR_AFTER_EXIT: Final = 1.0

log = logging.getLogger("sandstream.runner")


def bwrap_available(program: str = "bwrap") -> bool:
    """True on Linux when ``program`` is on ``PATH``."""
    return sys.platform.startswith("linux") and shutil.which(program) is not None


def python_paths() -> list[str]:
    """Host paths the default container needs: this Python and the sandstream packages."""
    paths = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    paths.append(os.path.dirname(os.path.realpath(sys.executable)))
    for package in ("sandstream.core", "sandstream.container"):
        spec = importlib.util.find_spec(package)
        if spec is not None and spec.submodule_search_locations:
            paths.extend(os.path.realpath(p) for p in spec.submodule_search_locations)
    return paths


@dataclass(eq=False)
class BwrapContainer:
    """A running sandbox: the ``bwrap`` process and its PID namespace's init."""

    process: SpawnedProcess
    turn_id: str
    init_pid: int
    pid_namespace: int
    """The inode of its PID namespace (``/proc/<pid>/ns/pid``), for checks."""
    exit: ContainerExit | None = None

    @property
    def id(self) -> str:
        return f"bwrap:{self.process.pid}"

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def stdout(self) -> trio.abc.ReceiveStream:
        stdout = self.process.stdout
        assert stdout is not None
        return stdout


@dataclass
class BwrapLauncher:
    """Run each container in a bubblewrap sandbox; see the module docstring.

    ``argv``: the container command. ``env``: more variables for it. ``network``:
    ``isolated`` (a network of its own through ``pasta``, which reaches the outside
    world, and the host's loopback only on the forwarded ports: the turn's callback
    port, the ports of ``allowed`` endpoints on this host and ``host_ports``),
    ``sealed`` (those forwarded ports and nothing else), ``host`` (the host's network)
    or ``none`` (loopback only). ``host_ports``: more ports of the host's loopback every
    sandbox of ``isolated`` or ``sealed`` reaches (the runner's own services for its
    sandboxes). ``allowed_ranges``: what an ``isolated`` sandbox reaches of the
    non-public ranges it is otherwise refused (:mod:`.egress`). ``limits``: per sandbox.
    ``hidden_paths``: host paths never visible (the server's data dir).
    ``extra_paths``: more host paths visible read-only. ``stderr``, ``pipe_size``: as
    for :class:`~sandstream.server.runner.launcher.LocalSubprocessLauncher`.
    ``use_cgroups``: enforce limits with a cgroup when one can be created.
    ``poll_interval``: seconds between two limit readings. Stopping a sandbox needs
    no grace: its init is ``SIGKILL``-ed, which ends the whole namespace at once.
    """

    argv: Sequence[str] = DEFAULT_CONTAINER_ARGV
    env: Mapping[str, str] = field(default_factory=dict)
    network: NetworkMode = "isolated"
    allowed: Sequence[Endpoint] = ()
    allowed_ranges: Sequence[AddressRange] = ()
    host_ports: Sequence[int] = ()
    limits: ResourceLimits = field(default_factory=ResourceLimits)
    hidden_paths: Sequence[str] = ()
    extra_paths: Sequence[str] = ()
    stderr: StderrMode = "log"
    pipe_size: int | None = 256 * 1024
    use_cgroups: bool = True
    poll_interval: float = 0.1
    bwrap: str = "bwrap"
    pasta: str = "pasta"
    cgroups: CgroupRoot | None = field(init=False, default=None)
    """Where sandbox cgroups are created (``None``: limits are read from ``/proc``)."""

    def __post_init__(self) -> None:
        if not self.argv:
            raise ValueError("argv must name a program")
        if not self.poll_interval > 0:
            raise ValueError(f"poll_interval must be > 0, got {self.poll_interval}")
        if shutil.which(self.bwrap) is None:
            raise ValueError(f"bubblewrap is not installed ({self.bwrap!r} is not on PATH)")
        if self.network in PASTA_NETWORKS and shutil.which(self.pasta) is None:
            raise ValueError(
                f"--sandbox-network {self.network} needs pasta ({self.pasta!r} is not on "
                "PATH; apt-get install passt), or choose --sandbox-network host or none"
            )
        if self.network == "sealed":
            for endpoint in self.allowed:
                if not is_forward_address(endpoint.host):
                    raise ValueError(
                        f"--sandbox-network sealed reaches only this host's loopback: "
                        f"--sandbox-allow {endpoint} is not on it (name 127.0.0.1, [::1] "
                        "or localhost, where the service listens)"
                    )
        for port in self.host_ports:
            if not 0 < port < 65536:
                raise ValueError(f"host_ports: not a port (1-65535): {port!r}")
        if self.use_cgroups:
            self.cgroups = find_cgroup_root()
            if self.cgroups is not None:
                self.cgroups.prune()

    # -- the command line ------------------------------------------------------------

    def sandbox_env(self, turn_id: str) -> dict[str, str]:
        """The whole environment a container of turn ``turn_id`` starts with."""
        python_bin = os.path.dirname(sys.executable)
        env = {
            "PATH": f"{python_bin}:/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin",
            "HOME": SANDBOX_TMP,
            "TMPDIR": SANDBOX_TMP,
            "LANG": os.environ.get("LANG") or "C.UTF-8",
            TURN_MARKER_ENV: turn_id,
        }
        env.update(container_heap_env(self.argv))
        env.update(self.env)
        return env

    def command(
        self, turn_id: str, *, info_fd: int, block_fd: int, argv: Sequence[str] | None = None
    ) -> list[str]:
        """The ``bwrap`` command line for one sandbox running ``argv`` (default: the
        container command). Raises :class:`LaunchError`."""
        inside, named = _resolve_command(self.argv if argv is None else argv)
        args = [
            self.bwrap,
            "--die-with-parent",
            "--new-session",
            "--unshare-pid",
            "--as-pid-1",  # no init of bwrap's: nothing else holds the container's pipes
            "--unshare-ipc",
            "--unshare-uts",
            "--hostname",
            "sandbox",
            "--unshare-cgroup-try",
            "--cap-drop",
            "ALL",
        ]
        if self.network != "host":
            args.append("--unshare-net")
        for path in SYSTEM_DIRS:
            if os.path.islink(path):
                args += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                args += ["--ro-bind", path, path]
        for entry in ETC_ENTRIES:
            args += ["--ro-bind-try", f"/etc/{entry}", f"/etc/{entry}"]
        args += ["--proc", "/proc", "--dev", "/dev"]
        size = [] if self.limits.disk_bytes is None else ["--size", str(self.limits.disk_bytes)]
        args += [*size, "--tmpfs", SANDBOX_TMP]
        # --dev leaves /dev/shm a directory of its unsized tmpfs: give it one of its own,
        # then make that unsized /dev read-only (its devices, /dev/pts and /dev/shm are
        # mounts of their own, which stay writable)
        args += ["--perms", "1777", *size, "--tmpfs", SANDBOX_SHM, "--remount-ro", "/dev"]
        hidden = [os.path.realpath(p) for p in self.hidden_paths]
        binds = _outermost(
            p
            for p in (*python_paths(), *named, *self.extra_paths)
            if not any(_within(p, h) for h in hidden)
        )
        for path in binds:
            args += ["--ro-bind", path, path]
        for path in hidden:
            if any(_within(path, b) for b in binds) and os.path.isdir(path):
                args += ["--tmpfs", path, "--remount-ro", path]
        env = self.sandbox_env(turn_id)
        if any(env.get(name) == value for name, value in HEAP_TUNABLES.items()):
            # glibc asks for huge pages only where this says the kernel gives them
            args += ["--ro-bind-try", THP_SETTINGS_DIR, THP_SETTINGS_DIR]
        args += ["--chdir", SANDBOX_TMP, "--clearenv"]
        for name, value in env.items():
            args += ["--setenv", name, value]
        args += ["--info-fd", str(info_fd), "--block-fd", str(block_fd), "--", *inside]
        return args

    # -- running ------------------------------------------------------------------------

    async def run(
        self,
        dispatch: bytes,
        turn_id: str,
        *,
        messages: trio.MemoryReceiveChannel[bytes] | None = None,
        task_status: trio.TaskStatus[ContainerHandle] = trio.TASK_STATUS_IGNORED,
    ) -> ContainerExit:
        """See :meth:`ContainerLauncher.run`. Raises :class:`LaunchError`.

        Cancellation: the sandbox's init and its children are ``SIGKILL``-ed at once,
        in the step the cancellation arrives (no grace: nothing of a cancelled run is
        kept), and this returns once bwrap, and so every process of the sandbox, is
        gone, and its mounts released. ``exit.reaped_at`` is then the moment the
        init's exit was seen (its pidfd), which the kernel allows only once the rest
        of the namespace is gone; bwrap is reaped right after.
        """
        binding = Binding.cold(Claim(dispatch, turn_id, messages))
        return await self._own(self.argv, turn_id, binding, task_status)

    async def run_warm(
        self,
        sandbox_id: str,
        binding: Binding,
        *,
        task_status: trio.TaskStatus[ContainerHandle] = trio.TASK_STATUS_IGNORED,
    ) -> ContainerExit:
        """See :meth:`~.launcher.WarmLauncher.run_warm`: the sandbox's network is made
        with it, its pasta started at the claim with the turn's ports. Raises
        :class:`LaunchError`."""
        return await self._own([*self.argv, WARM_FLAG], sandbox_id, binding, task_status)

    async def _own(
        self,
        argv: Sequence[str],
        turn_id: str,
        binding: Binding,
        task_status: trio.TaskStatus[ContainerHandle],
    ) -> ContainerExit:
        """:meth:`_run` in a cgroup of its own, removed after; the turn's messages are
        closed once the sandbox is gone."""
        try:
            cgroup = self._create_cgroup(turn_id)
        except BaseException:
            if (messages := binding.turn_messages()) is not None:
                messages.close()
            raise
        try:
            return await self._run(argv, turn_id, binding, cgroup, task_status)
        finally:
            if (messages := binding.turn_messages()) is not None:
                messages.close()  # the sandbox is gone: a sender learns it
            if cgroup is not None:
                with trio.CancelScope(shield=True):
                    if not await cgroup.remove():
                        log.warning("turn %s: could not remove cgroup %s", turn_id, cgroup.pids)

    def _create_cgroup(self, turn_id: str) -> CgroupMeter | None:
        if self.cgroups is None:
            return None
        try:
            return self.cgroups.create(turn_id, self.limits)
        except OSError as exc:
            raise LaunchError(exc.errno, f"cannot create the sandbox's cgroup: {exc}") from exc

    async def _run(
        self,
        argv: Sequence[str],
        turn_id: str,
        binding: Binding,
        cgroup: CgroupMeter | None,
        task_status: trio.TaskStatus[ContainerHandle],
    ) -> ContainerExit:
        """Start the sandbox, hand it to ``task_status``, tend it until bwrap exits, then
        tear it down and return how it ended. A cold sandbox's network is connected
        before its command runs; a warm one's when it is claimed (:meth:`_connect`).

        Cancellation before the sandbox is handed over: what was started is killed and
        released before this raises (:meth:`_spawn`, :meth:`_start`). After: the sandbox
        is killed at once (:meth:`_supervise`) and torn down, shielded, before this
        raises (:meth:`_Sandbox.teardown`).
        """
        plan = None
        if not binding.warm:
            plan = await self._network_plan((await binding.wait_claimed()).dispatch)
        process, info_r, block_w = await self._spawn(turn_id, argv)
        sandbox = await self._start(process, turn_id, info_r, block_w, cgroup, plan)
        container = BwrapContainer(process, turn_id, sandbox.init_pid, sandbox.namespace)
        if self.pipe_size:
            grow_pipe(container.stdout, self.pipe_size)
        meter: Meter = cgroup if cgroup is not None else ProcMeter(sandbox.init_pid)
        task_status.started(container)
        try:
            await self._supervise(sandbox, binding, meter)
        finally:
            with trio.CancelScope(shield=True):
                container.exit = await sandbox.teardown()
        assert container.exit is not None
        return container.exit

    async def _forwarded_ports(self, dispatch: bytes) -> list[int]:
        """The host ports a sandbox's pasta forwards (``isolated``, ``sealed``): the
        turn's callback and model gateway ports, those of the ``allowed`` endpoints on
        this host and ``host_ports``; [] for other networks. The one list of them: a
        port every sandbox should reach joins ``host_ports``.

        Raises :class:`LaunchError` for a ``sealed`` sandbox whose callback or gateway
        is not on this host (it could not reach it). Cancellation: raises, nothing to
        undo."""
        if self.network not in PASTA_NETWORKS:
            return []
        endpoints = dispatch_endpoints(dispatch)
        if self.network == "sealed":
            for endpoint in endpoints:
                if not await forwarded_ports([endpoint]):
                    raise LaunchError(
                        0,
                        f"a sealed sandbox reaches only this host's loopback: {endpoint} "
                        "(its callback or model gateway) is not on this host",
                    )
        return await forwarded_ports([*endpoints, *self.allowed], self.host_ports)

    async def _network_plan(self, dispatch: bytes) -> _NetworkPlan:
        """How a sandbox of the turn of ``dispatch`` is connected: the forwarded ports
        (:meth:`_forwarded_ports`) and, ``isolated``, what it reaches of the refused
        ranges (:func:`~.egress.openings`). Raises :class:`LaunchError`."""
        ports = await self._forwarded_ports(dispatch)
        opened: list[Opening] = []
        if self.network == "isolated":
            endpoints = [*dispatch_endpoints(dispatch), *self.allowed]
            opened = await openings(endpoints, self.allowed_ranges)
        return _NetworkPlan(ports, opened)

    async def _connect_network(self, init_pid: int, plan: _NetworkPlan) -> SpawnedProcess:
        """Start the sandbox's pasta, then (``isolated``) refuse the non-public ranges
        (:func:`~.egress.refuse_ranges`: after pasta, whose default route the kernel
        would refuse once its gateway is), before the sandbox's command gets its
        dispatch. Raises :class:`LaunchError`, pasta then stopped. Cancellation: the
        same."""
        outside = self.network == "isolated"
        pasta = await start_pasta(self.pasta, init_pid, plan.ports, outside=outside)
        if outside:
            try:
                await refuse_ranges(init_pid, plan.openings)
            except BaseException:
                with trio.CancelScope(shield=True):
                    await stop_pasta(pasta)
                raise
        return pasta

    async def _spawn(self, turn_id: str, argv: Sequence[str]) -> tuple[SpawnedProcess, int, int]:
        """Start bwrap, which stops before running the container until it is unblocked:
        (bwrap, the read end of its ``--info-fd`` pipe, the write end of its
        ``--block-fd`` pipe); the other ends are closed. Raises :class:`LaunchError`.

        Cancellation or failure: the four pipe ends are closed before this raises
        (:func:`~.spawn.spawn` hands back a process it forked, cancelled or not).
        """
        info_r, info_w = os.pipe()
        block_r, block_w = os.pipe()
        try:
            command = self.command(turn_id, info_fd=info_w, block_fd=block_r, argv=argv)
            try:
                process = await spawn(
                    command,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=STDERR_TARGETS[self.stderr],
                    start_new_session=True,
                    env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},
                    pass_fds=(info_w, block_r),
                )
            except OSError as exc:
                message = f"cannot start {self.bwrap!r}: {exc.strerror or exc}"
                raise LaunchError(exc.errno, message) from exc
        except BaseException:
            for fd in (info_r, info_w, block_r, block_w):
                os.close(fd)
            raise
        os.close(info_w)
        os.close(block_r)
        return process, info_r, block_w

    async def _start(
        self,
        process: SpawnedProcess,
        turn_id: str,
        info_r: int,
        block_w: int,
        cgroup: CgroupMeter | None,
        plan: _NetworkPlan | None,
    ) -> _Sandbox:
        """Bring up the sandbox bwrap set up: read its init's pid and PID namespace from
        ``info_r`` (which this closes), hold the init's pidfd and mount namespace, put it
        in ``cgroup``, connect its network through pasta (``isolated``, ``sealed``:
        ``plan``; ``None``: later, :meth:`_connect`), then unblock bwrap through
        ``block_w`` (closed in every case) so that it runs the container. Raises
        :class:`LaunchError`.

        Cancellation or failure: bwrap's process group is killed and reaped, and what
        was taken so far released, shielded, before this raises
        (:func:`_abandon_start`).
        """
        init_pidfd: int | None = None
        mounts: int | None = None
        pasta: SpawnedProcess | None = None
        try:
            info = await _read_info(info_r)
            if info is None:
                raise LaunchError(0, await self._startup_failure(process))
            init_pid, namespace = info
            init_pidfd = open_pidfd(init_pid)
            mounts = _hold_mounts(init_pid)
            if cgroup is not None:
                try:
                    cgroup.attach(init_pid)
                except OSError as exc:
                    raise LaunchError(
                        exc.errno, f"cannot enter the sandbox's cgroup: {exc}"
                    ) from exc
            if self.network in PASTA_NETWORKS and plan is not None:
                pasta = await self._connect_network(init_pid, plan)
            os.write(block_w, b"1")
        except BaseException:
            with trio.CancelScope(shield=True):
                await _abandon_start(process, init_pidfd, mounts, pasta)
            raise
        finally:
            os.close(block_w)
        return _Sandbox(process, turn_id, init_pid, namespace, init_pidfd, mounts, pasta)

    async def _connect(self, sandbox: _Sandbox, claim: Claim) -> None:
        """A warm sandbox's per-turn step: its pasta, forwarding the claim's ports
        (``isolated``, ``sealed``; nothing for other networks). Raises
        :class:`LaunchError`, the sandbox then killed. Cancellation: pasta is stopped
        by :func:`~.network.start_pasta`, the sandbox by the run's teardown."""
        if self.network not in PASTA_NETWORKS:
            return
        try:
            plan = await self._network_plan(claim.dispatch)
            sandbox.pasta = await self._connect_network(sandbox.init_pid, plan)
        except LaunchError:
            sandbox.kill()
            raise

    async def _supervise(self, sandbox: _Sandbox, binding: Binding, meter: Meter) -> None:
        """Feed the container what ``binding`` brings (:func:`~.launcher.feed_bound`; a
        warm one's network first, :meth:`_connect`), log its stderr and hold it to
        its limits until bwrap exits (it does when the init does); then close the
        turn's messages, note a limit the kernel enforced, and let its stderr drain for at
        most :data:`_DRAIN_STDERR_AFTER_EXIT` s.

        Cancellation: the sandbox is killed in that step, not once the feeders have
        unwound (``sandbox.stopped_at`` says when), and ``Cancelled`` propagates; the
        caller's teardown waits for the sandbox to be gone.
        """
        process = sandbox.process
        limit_scope = trio.CancelScope()
        async with trio.open_nursery() as nursery:
            assert process.stdin is not None
            prepare = partial(self._connect, sandbox) if binding.warm else None
            nursery.start_soon(feed_bound, process.stdin, binding, prepare)
            if process.stderr is not None:
                nursery.start_soon(log_stderr, process.stderr, sandbox.turn_id)
            nursery.start_soon(self._enforce_limits, sandbox, binding, meter, limit_scope)
            try:
                await process.wait_exited()
            except trio.Cancelled:
                # The turn is over: kill now, not once this nursery has unwound.
                sandbox.stopped_at = time.monotonic()
                sandbox.kill()
                raise
            sandbox.exited = True
            if (messages := binding.turn_messages()) is not None:
                messages.close()  # nobody reads them any more
            limit_scope.cancel()
            if sandbox.limit is None:  # a kernel-enforced hit the last poll did not see
                sandbox.limit = exceeded(meter.sample(), self.limits)
                if sandbox.limit is not None:
                    log.warning(
                        "turn %s: %s (seen at exit)", sandbox.turn_id, sandbox.limit.message
                    )
            nursery.cancel_scope.deadline = trio.current_time() + _DRAIN_STDERR_AFTER_EXIT

    async def _enforce_limits(
        self, sandbox: _Sandbox, binding: Binding, meter: Meter, limit_scope: trio.CancelScope
    ) -> None:
        """Read ``meter`` and the sandbox's ``/tmp`` and ``/dev/shm`` usage every
        ``poll_interval`` s, from the moment ``binding`` is settled (a warm sandbox idles
        without a reading; where it has a cgroup, the kernel holds its memory and
        process limits meanwhile); at
        the first limit exceeded, note it in ``sandbox.limit`` and kill the sandbox.
        Cancellation (``limit_scope`` once bwrap exited, or the run's): returns, or
        raises ``Cancelled``, with nothing to undo."""
        init_pid = sandbox.init_pid
        disks = [f"/proc/{init_pid}/root{path}" for path in (SANDBOX_TMP, SANDBOX_SHM)]
        with limit_scope:
            await binding.wait_settled()
            sandbox.limit = await watch_limits(
                meter, self.limits, disk_paths=disks, interval=self.poll_interval
            )
            log.warning("turn %s: %s; ending the sandbox", sandbox.turn_id, sandbox.limit.message)
            sandbox.kill()

    async def _startup_failure(self, process: SpawnedProcess) -> str:
        """bwrap exited before starting the sandbox: its status and last stderr line."""
        last = ""
        if process.stderr is not None:
            with trio.move_on_after(_STARTUP_TIMEOUT):
                data = b""
                while chunk := await process.stderr.receive_some(65536):
                    data = (data + chunk)[-4096:]
                lines = data.decode("utf-8", "replace").strip().splitlines()
                last = f": {lines[-1]}" if lines else ""
        returncode = await process.wait()
        return f"bubblewrap could not start the sandbox (status {returncode}){last}"


async def _abandon_start(
    process: SpawnedProcess,
    init_pidfd: int | None,
    mounts: int | None,
    pasta: SpawnedProcess | None,
) -> None:
    """Undo a start that failed or was cancelled: ``SIGKILL`` bwrap's process group and
    reap it, close the init's pidfd, release the mounts, stop pasta, close bwrap's pipes.
    Call it shielded."""
    signal_group(process.pid, signal.SIGKILL)
    await process.wait()
    close_pidfd(init_pidfd)
    await _release_mounts(mounts)
    if pasta is not None:
        await stop_pasta(pasta)
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            await stream.aclose()


@dataclass(frozen=True)
class _NetworkPlan:
    """How a sandbox's network is connected (``isolated``, ``sealed``)."""

    ports: list[int]
    """The host's loopback ports its pasta forwards."""
    openings: list[Opening]
    """What it reaches of the refused ranges (``isolated``)."""


@dataclass(eq=False)
class _Sandbox:
    """A started sandbox as :meth:`BwrapLauncher.run` tends it: what its teardown
    releases, and what happened to it on the way."""

    process: SpawnedProcess
    """bwrap."""
    turn_id: str
    init_pid: int
    namespace: int
    """The inode of its PID namespace; 0: unknown."""
    init_pidfd: int | None
    mounts: int | None
    """An fd holding its mount namespace (:func:`_hold_mounts`)."""
    pasta: SpawnedProcess | None
    """The pasta connecting its network (``isolated``, ``sealed``)."""
    exited: bool = False
    """bwrap exited while the run was tending it, uncancelled."""
    stopped_at: float | None = None
    """When it was killed for the run's end (cancelled or torn down before bwrap exited)."""
    limit: LimitExceeded | None = None
    """The limit it exceeded, if it did."""
    killed: bool = False

    def kill(self) -> None:
        """``SIGKILL`` every process of the sandbox (:func:`_kill_sandbox`); once."""
        if not self.killed:
            self.killed = True
            _kill_sandbox(self.init_pid, self.init_pidfd, self.namespace)

    async def teardown(self) -> ContainerExit:
        """Kill the sandbox, also when bwrap exited by itself (it exits as soon as the
        init does, which the kernel follows by killing the rest), wait until its PID
        namespace is empty and bwrap reaped (bwrap stuck for :data:`_STARTUP_TIMEOUT` s:
        its process group is ``SIGKILL``-ed too), then release its mounts and stop its
        pasta; return how it ended. Call it shielded: it must not be cancelled.
        """
        if not self.exited and self.stopped_at is None:
            self.stopped_at = time.monotonic()
        self.kill()
        emptied_at: float | None = None
        escalated = False
        with trio.move_on_after(_STARTUP_TIMEOUT) as wait:
            if self.init_pidfd is not None:
                # The init exits last, once the kernel has ended every
                # other process of its namespace: the sandbox is empty.
                await trio.lowlevel.wait_readable(self.init_pidfd)
                emptied_at = time.monotonic()
            await self.process.wait_exited()
        if wait.cancelled_caught:  # bwrap itself is stuck: it goes too
            escalated = True
            signal_group(self.process.pid, signal.SIGKILL)
        returncode = await self.process.wait()
        reaped_at = emptied_at or time.monotonic()
        close_pidfd(self.init_pidfd)
        await _release_mounts(self.mounts)
        if self.pasta is not None:  # the namespace is empty: its network goes
            await stop_pasta(self.pasta)
        return ContainerExit(
            returncode=returncode,
            terminated=self.stopped_at is not None,
            escalated=escalated,
            stopped_at=self.stopped_at,
            reaped_at=reaped_at,
            limit=self.limit,
        )


def _kill_sandbox(init_pid: int, init_pidfd: int | None, namespace: int) -> None:
    """``SIGKILL`` the init's children, then the init (and so the whole namespace).

    Gone already is fine. A child is signalled through a pidfd once its PID namespace
    is checked to be the sandbox's (``namespace``; 0, unknown: the init alone), so a
    pid reused meanwhile is never hit. At most :data:`_DIRECT_KILLS` children: the
    kernel kills the rest when the init dies.
    """
    if namespace:
        for pid in _children(init_pid)[:_DIRECT_KILLS]:
            _kill_member(pid, namespace)
    with contextlib.suppress(OSError):
        if init_pidfd is not None:
            signal.pidfd_send_signal(init_pidfd, signal.SIGKILL)
        else:
            os.kill(init_pid, signal.SIGKILL)
        _boost(init_pid)


def _children(pid: int) -> list[int]:
    """The children of ``pid`` (Linux ``/proc/<pid>/task/<pid>/children``); [] if unreadable."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children", "rb") as file:
            return [int(child) for child in file.read().split()]
    except (OSError, ValueError):
        return []


def _kill_member(pid: int, namespace: int) -> None:
    """``SIGKILL`` ``pid`` if it is a process of PID namespace ``namespace``."""
    pidfd = open_pidfd(pid)
    if pidfd is None:
        return
    try:
        if os.stat(f"/proc/{pid}/ns/pid").st_ino == namespace:
            signal.pidfd_send_signal(pidfd, signal.SIGKILL)
            _boost(pid)
    except OSError:
        pass  # gone meanwhile
    finally:
        os.close(pidfd)


def _boost(pid: int) -> None:
    """Move a process's threads to ``SCHED_FIFO`` 1 so its exit runs ahead of other work.

    Call only once ``SIGKILL`` is pending (no code of the sandbox may run at real-time
    priority). Needs ``CAP_SYS_NICE`` or an ``RLIMIT_RTPRIO``; refused quietly otherwise.
    """
    try:
        threads = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return
    priority = os.sched_param(_TEARDOWN_PRIORITY)
    for thread in threads:
        with contextlib.suppress(OSError, ValueError):
            os.sched_setscheduler(int(thread), os.SCHED_FIFO, priority)


def _hold_mounts(init_pid: int) -> int | None:
    """An fd holding the sandbox's mount namespace, or None if it cannot be opened."""
    try:
        return os.open(f"/proc/{init_pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None


async def _release_mounts(mounts: int | None) -> None:
    """Close the fd from :func:`_hold_mounts`: the kernel unmounts the sandbox's file
    systems (and frees its ``/tmp``) in a worker thread. Call it shielded."""
    if mounts is not None:
        await trio.to_thread.run_sync(os.close, mounts)


async def _read_info(fd: int) -> tuple[int, int] | None:
    """bwrap's ``--info-fd`` document: (init pid, PID namespace inode), or None at EOF."""
    data = b""
    async with trio.lowlevel.FdStream(fd) as stream:
        with trio.move_on_after(_STARTUP_TIMEOUT):
            while chunk := await stream.receive_some(4096):
                data += chunk
    try:
        info = json.loads(data)
        return int(info["child-pid"]), int(info.get("pid-namespace", 0))
    except (ValueError, KeyError, TypeError):
        return None


def _resolve_command(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(argv to run inside, host paths it names). Raises :class:`LaunchError`."""
    program = argv[0]
    found = shutil.which(program) if os.sep not in program else program
    if found is None or not os.path.exists(found):
        raise LaunchError(2, f"cannot start {program!r}: No such file or directory")
    executable = os.path.abspath(found)
    inside = [executable]
    named = _program_paths(executable)
    for arg in argv[1:]:
        if arg and not arg.startswith("-") and os.path.exists(arg):
            absolute = os.path.abspath(arg)
            inside.append(absolute)
            named += [absolute, os.path.realpath(absolute)]
        else:
            inside.append(arg)
    return inside, named


def _program_paths(executable: str, depth: int = 0) -> list[str]:
    """An executable, what its symlinks point at, its venv, its script interpreter."""
    real = os.path.realpath(executable)
    paths = [executable, real]
    for candidate in (executable, real):
        venv = Path(candidate).parent.parent
        if (venv / "pyvenv.cfg").is_file():
            paths.append(str(venv))
        if Path(candidate).name.startswith("python"):
            paths.append(str(Path(candidate).parent.parent))
    if depth < 2:
        interpreter = _shebang(real)
        if interpreter is not None:
            paths += _program_paths(interpreter, depth + 1)
    return paths


def _shebang(path: str) -> str | None:
    """The interpreter a ``#!`` script names (``env X`` resolved on the host's PATH)."""
    try:
        with open(path, "rb") as file:
            head = file.readline(256)
    except OSError:
        return None
    if not head.startswith(b"#!"):
        return None
    words = head[2:].decode("utf-8", "replace").split()
    if not words:
        return None
    if os.path.basename(words[0]) == "env" and len(words) > 1:
        return shutil.which(words[1])
    return words[0] if os.path.exists(words[0]) else None


def _within(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _outermost(paths: Iterable[str]) -> list[str]:
    """Existing absolute paths, minus those inside another one or in the system dirs."""
    existing = sorted({os.path.abspath(p) for p in paths if p and os.path.exists(p)})
    kept: list[str] = []
    for path in existing:
        if any(_within(path, d) for d in (*SYSTEM_DIRS, *kept)):
            continue
        kept.append(path)
    return kept
