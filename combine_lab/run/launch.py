"""Start one host-driver process per PE, wait for all of them, and clean up whatever happens.

Every run gets a fresh session (a unique twin shared-memory name and a free TCP port for
SHMEM's bootstrap), so two runs never collide, even at once. On failure, timeout, Ctrl-C or
SIGTERM every PE's process group is killed and the run's ``/dev/shm`` segment removed.

A launcher that dies without cleaning up (SIGKILL, a crash) takes its PEs with it: each PE is
told the launcher's pid (``COMBINE_LAB_LAUNCHER_PID``), asks the kernel to kill it when its
parent dies (``prctl(PR_SET_PDEATHSIG)``) and exits at once if its parent is already another
process. What such a launcher leaves on disk (its case folder, ``<tmp>/combine_lab_case_p<pid>_*``)
and in ``/dev/shm`` (its session's segment) is removed by the next run, once the pid in the name
is no process started before the folder (:func:`remove_orphans`).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

import psutil

from ..kernels import DRIVER_POLICY as KERNEL_DRIVER_POLICY
from ..errors import CombineLabError, ParameterError

SHM_PREFIX = "combine_twin_"
_POLL_S = 0.01
_GRACE_S = 2.0  # after one PE fails, the others get this long to notice and exit
_STOPPED_BY_PEER = 4  # host/twin: a PE exits with 4 when another PE failed first

#: The environment variable that tells each PE its launcher's pid (see :func:`die_with_launcher`).
LAUNCHER_PID_ENV = "COMBINE_LAB_LAUNCHER_PID"
#: Folders a run owns under the temporary folder: ``combine_lab_<kind>_p<pid>_<random>``.
_OWNED_DIR = re.compile(r"^combine_lab_[a-z]+_p(\d+)_")
#: The launcher's pid in a session name (:func:`new_session`): ``...cl<pid>_<12 hex>``.
_SESSION_PID = re.compile(r"cl(\d+)_[0-9a-f]{12}$")

#: The host driver's ``policy`` argument for each variant (host/host_args.cpp spells them
#: mte_only and dual_plane); the only place the driver's own words for the variants appear.
DRIVER_POLICY = KERNEL_DRIVER_POLICY  # the descriptor's (combine_lab.kernels)


@dataclass(frozen=True)
class WaitGaveUp:
    """A twin status wait that gave up (host/twin/twin_heap.cpp): PE ``pe``'s core ``core`` waited
    ``seconds`` for status slot ``slot`` and nothing landed (docs/twin.md#2-sessions-and-cleanup)."""

    pe: int
    core: int
    seconds: float
    slot: int


#: The twin's line for a wait that gave up, as its fatal() prints it on the PE's stderr.
_WAIT_GAVE_UP = re.compile(r"PE (\d+) core (\d+): timed out after ([\d.]+) s waiting for status slot (\d+)")


def wait_gave_up(stderr: str) -> WaitGaveUp | None:
    """The first wait that gave up in a PE's stderr (the twin's own line), or None. The one reader of
    that line: errors carry the result (:attr:`LaunchError.wait`), nobody parses a message."""
    m = _WAIT_GAVE_UP.search(stderr or "")
    return WaitGaveUp(int(m[1]), int(m[2]), float(m[3]), int(m[4])) if m else None


class LaunchError(CombineLabError, RuntimeError):
    """A PE failed or the run timed out. ``pe`` is the first failing PE (or None on timeout);
    ``timed_out``: the launcher's limit (``timeout_s``) ran out with PEs still running; ``wait``: a
    twin status wait that gave up (:class:`WaitGaveUp`: which PE, core and slot), when one did;
    ``stderr``: PE -> the last lines it wrote on stderr (the twin's and the driver's own words), for
    each PE that failed or was still running, as read when the launch ended ({} when none were read)."""

    def __init__(self, message: str, pe: int | None = None, returncode: int | None = None, *,
                 timed_out: bool = False, wait: WaitGaveUp | None = None, stderr: dict[int, str] | None = None,
                 **fields):
        super().__init__(message, **fields)  # parameter=, value=: a limit that ran out names itself
        self.pe = pe
        self.returncode = returncode
        self.timed_out = timed_out
        self.wait = wait
        self.stderr = dict(stderr or {})

    def stderr_lines(self) -> list[str]:
        """Every line of :attr:`stderr`, PE by PE: what the PEs said, never this error's own wording."""
        return [ln for pe in sorted(self.stderr) for ln in self.stderr[pe].splitlines()]

    @property
    def hung(self) -> bool:
        """True when the run did not end by itself: the launcher's limit ran out or a wait gave up."""
        return self.timed_out or self.wait is not None


@dataclass
class PeOutcome:
    """How one PE's process ended: ``returncode``, ``stdout`` and ``stderr`` text."""

    pe: int
    returncode: int
    stdout: str
    stderr: str


#: What this process made that a run must not leave behind: its temporary folders and twin sessions.
_made_dirs: set[Path] = set()
_made_sessions: set[str] = set()


def new_session() -> str:
    """A session name unique to this process and call (letters, digits, underscore),
    prefixed by ``$COMBINE_LAB_SESSION_TAG`` when set (a test run tags its own sessions)."""
    tag = "".join(c for c in os.environ.get("COMBINE_LAB_SESSION_TAG", "") if c.isalnum())
    name = f"{tag}cl{os.getpid()}_{uuid.uuid4().hex[:12]}"
    _made_sessions.add(name)
    return name


def owned_temp_dir(kind: str) -> Path:
    """A fresh folder ``<tmp>/combine_lab_<kind>_p<pid>_<random>`` for this process (``kind``:
    lowercase letters, e.g. ``case``). The pid in its name lets a later run remove it when this
    process died without doing so (:func:`remove_orphans`); :func:`leftovers` lists it while it exists."""
    path = Path(tempfile.mkdtemp(prefix=f"combine_lab_{kind}_p{os.getpid()}_"))
    _made_dirs.add(path)
    return path


def leftovers(clean: bool = True) -> list[str]:
    """What this process made and has not removed: its temporary folders (case files), its twin
    sessions' segments in /dev/shm, its PE processes still alive; each removed or killed first when
    ``clean`` (an interrupt's last word). Returns a line for each that is still there, so that a
    message says what is true: [] when nothing is left."""
    left = []
    for d in sorted(_made_dirs):
        if clean:
            shutil.rmtree(d, ignore_errors=True)
        if d.exists():
            left.append(f"folder {d}")
        else:
            _made_dirs.discard(d)
    for name in sorted(_made_sessions):
        seg = shm_path(name)
        if clean:
            with contextlib.suppress(OSError):
                seg.unlink()
        if seg.exists():
            left.append(f"shared memory {seg}")
    try:
        kids = [p for p in psutil.Process().children(recursive=True) if p.is_running()
                and p.status() != psutil.STATUS_ZOMBIE]
    except psutil.Error:
        kids = []
    for p in kids:
        if clean:
            with contextlib.suppress(psutil.Error):
                p.kill()
    if kids and clean:
        _, alive = psutil.wait_procs(kids, timeout=3)
        kids = alive
    left += [f"process {p.pid}" for p in kids]
    return left


def owner_gone(pid: int, since: float) -> bool:
    """True when no process ``pid`` that could have made something at time ``since`` (seconds
    since the epoch) is alive: the pid is free, or it now belongs to a process started later."""
    if pid == os.getpid():
        return False
    try:
        return psutil.Process(pid).create_time() > since + 1.0
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:  # not ours to inspect: assume it is alive
        return False


def remove_orphans(tmp_dir: str | os.PathLike | None = None) -> list[Path]:
    """Remove what launchers that died (SIGKILL, a crash) left behind: their case folders
    (:func:`owned_temp_dir` under ``tmp_dir``, default the temporary folder) and their sessions'
    twin segments in ``/dev/shm`` (:func:`new_session`), each only when the pid in its name is
    gone (:func:`owner_gone`). Returns what was removed. Never raises for a file another process
    removed first or that is not ours to remove."""
    removed = []
    candidates = []
    tmp = Path(tmp_dir) if tmp_dir is not None else Path(tempfile.gettempdir())
    try:
        candidates += [(p, int(m.group(1))) for p in tmp.iterdir() if (m := _OWNED_DIR.match(p.name))]
    except OSError:
        pass
    candidates += [(p, int(m.group(1))) for p in Path("/dev/shm").glob(f"{SHM_PREFIX}*")
                   if (m := _SESSION_PID.search(p.name))]
    for path, pid in candidates:
        try:
            made = path.stat().st_mtime
        except OSError:
            continue
        if not owner_gone(pid, made):
            continue
        try:
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed.append(path)
        except OSError:
            continue
    return removed


def die_with_launcher() -> None:
    """For a PE written in Python (the baseline worker): be killed when the launcher dies, as the
    host driver is (``prctl(PR_SET_PDEATHSIG, SIGKILL)``), and exit now (status 6) when the
    launcher named by ``COMBINE_LAB_LAUNCHER_PID`` is already gone (this process's parent is
    then another one). Does nothing where prctl does not exist (not Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG = 1
    except (OSError, AttributeError):
        return
    want = os.environ.get(LAUNCHER_PID_ENV, "")
    if want.isdigit() and os.getppid() != int(want):
        print(f"PE: launcher {want} is gone (parent is now {os.getppid()}); not starting", file=sys.stderr)
        os._exit(6)


def tagged_segments(tag: str) -> set[str]:
    """Names of the twin's /dev/shm segments whose session starts with ``tag`` (see :func:`new_session`)."""
    return {p.name for p in Path("/dev/shm").glob(f"{SHM_PREFIX}{tag}*")}


def tagged_host_pids(tag: str) -> set[int]:
    """PIDs of live (not zombie) host-driver processes started with ``COMBINE_LAB_SESSION_TAG=tag``."""
    out = set()
    for proc in psutil.process_iter(["cmdline", "status"]):
        try:
            argv = proc.info["cmdline"] or []
            if not argv or not argv[0].endswith("combine_host") or proc.info["status"] == psutil.STATUS_ZOMBIE:
                continue
            if proc.environ().get("COMBINE_LAB_SESSION_TAG") == tag:
                out.add(proc.pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue  # gone, or not ours to read: not a PE of this session
    return out


def stop_grace_s() -> float:
    """Seconds the other PEs get to stop by themselves after one fails, before they are killed:
    ``$COMBINE_LAB_STOP_GRACE_S`` when set (tests shorten it, as they do COMBINE_TWIN_TIMEOUT_S,
    where a PE fails before the others can notice), else 2.0."""
    return float(os.environ.get("COMBINE_LAB_STOP_GRACE_S", _GRACE_S))


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free right now (for SHMEM's ``ip_port``)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_IPPORT = re.compile(r"^tcp6?://(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$")
#: SHMEM's ``aclshmemx_init_attr_t.ip_port`` is ``char[64]``: 63 characters and the terminator.
IPPORT_MAX_CHARS = 63


def check_ipport(ipport: str, name: str = "ipport") -> str:
    """``ipport`` if SHMEM's bootstrap can use it: ``tcp://HOST:PORT`` (``tcp6://[ADDR]:PORT`` for
    IPv6), PORT in 1-65535, at most 63 characters (``ip_port[64]``). Returns it.

    Raises ParameterError naming ``name`` (a flag such as ``-ipport``), the value and the form,
    before any PE starts (a PE would otherwise fail at SHMEM's bootstrap, or use a cut address).
    """
    m = _IPPORT.match(ipport) if isinstance(ipport, str) else None
    if m is None or not 1 <= int(m.group(2)) <= 65535 or len(ipport) > IPPORT_MAX_CHARS:
        raise ParameterError(f"{name}={ipport!r}: must be tcp://HOST:PORT (e.g. tcp://127.0.0.1:8767), PORT in "
                             f"1-65535, at most {IPPORT_MAX_CHARS} characters",
                             parameter="ipport", value=ipport, said_as=name if name.startswith("-") else None)
    return ipport


def bootstrap_ipport(port: int | None = None) -> str:
    """SHMEM's bootstrap address for one run: ``tcp://127.0.0.1:<port>``, a free port by default."""
    return f"tcp://127.0.0.1:{free_port() if port is None else int(port)}"


def host_argv(*, pe_size: int, pe_id: int, ipport: str, g_npus: int, first_pe: int = 0, first_npu: int = 0,
              dtype: str, bs: int, h: int, topk: int, expert_per_pe: int, perf: bool, warmup: int, loops: int,
              csv: str | os.PathLike, case_id: str, variant: str, min_sdma_bytes: int,
              case_root: str | os.PathLike, policy: str | None = None, cores_per_rank: int = 1) -> list[str]:
    """The host driver's arguments for one PE (host/host_args.cpp ``kHostUsage``), as strings.

    The same on both targets: on the NPU, PE ``pe_id`` takes device ``pe_id % g_npus + first_npu``
    (``-fnpu``) and every PE bootstraps SHMEM at ``ipport`` (``-ipport``, one free 127.0.0.1 port
    per run). ``variant``: ``classic`` or ``doubleplane``, passed as the driver's policy
    (:data:`DRIVER_POLICY`), unless ``policy`` names it (``dual_plane_segment``: the segment
    variant, docs/variants.md); ``cores_per_rank``: AIV cores per source rank (passed when not 1);
    ``perf``: write the perf row.

    Raises KeyError for a variant not in :data:`DRIVER_POLICY` (run_case checks it first).
    """
    args = [str(v) for v in (pe_size, pe_id, ipport, g_npus, first_pe, first_npu, dtype, bs, h, topk, expert_per_pe,
                             int(bool(perf)), warmup, loops, csv, case_id, policy or DRIVER_POLICY[variant],
                             min_sdma_bytes, case_root)]
    return args + ([str(int(cores_per_rank))] if int(cores_per_rank) != 1 else [])


def shm_path(session: str) -> Path:
    """The twin's shared-memory segment of ``session`` (see host/twin/twin_heap.cpp)."""
    return Path("/dev/shm") / f"{SHM_PREFIX}{session}"


def _tail(path: Path, lines: int = 12) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.strip().splitlines()[-lines:])


def _is_stopped(proc: subprocess.Popen) -> bool:
    """Whether ``proc`` is stopped by a signal (SIGSTOP, SIGTSTP, a debugger): alive, never finishing."""
    try:
        return psutil.Process(proc.pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
    except psutil.Error:
        return False


def _failure_text(origin: int, code: int | None, stopped: bool, failed: Sequence[int], tails: dict[int, str]) -> str:
    """What a failed launch says: how PE ``origin`` ended, what it wrote on stderr (its last 12 lines,
    or that it wrote nothing: a PE killed by a signal often has no last word), and the other failed
    PEs' lines that name a slot they waited for (a wait for the PE that failed); ``tails``: each of
    those PEs' stderr tail, read once."""
    if stopped:
        how = "was stopped by a signal (SIGSTOP or SIGTSTP) and never finished; the launcher killed it"
    elif code is None:
        how = "was still running when the others had failed; the launcher killed it"
    elif code < 0:
        name = signal.Signals(-code).name if -code in signal.Signals._value2member_map_ else "unknown"
        how = f"killed by signal {-code} ({name})"
    else:
        how = f"exited with status {code}"
    lines = tails[origin].splitlines()[-12:]
    why = failure_reason("\n".join(lines))  # the twin's or the driver's own reason, first (docs/cli.md#6-exit-status)
    if why:  # said once: the reason's line (failure_reason took it from these lines) is not repeated below it
        del lines[next(i for i, ln in enumerate(lines) if ln.strip() == why)]
    said = "\n".join(lines) if lines or why else "(it wrote nothing on stderr)"
    waits = [f"PE {pe}: {line}" for pe in failed if pe != origin
             for line in tails[pe].splitlines() if "slot" in line][:8]
    return (f"PE {origin} {how}:{' ' + why if why else ''}" + (f"\n{said}" if said else "")
            + ("\nthe others waited for it:\n" + "\n".join(waits) if waits else ""))


#: A status wait of the twin gives up once nothing has landed on any PE for its wait budget: at
#: least this long (seconds) ...
WAIT_FLOOR_S = 10.0
#: ... or 4x the time the twin takes to move every row of the case at this rate (bytes per second,
#: what a loaded two-core machine's twin does; the twin, not an NPU, is what waits here).
TWIN_BYTES_PER_S = 50e6


def wait_budget_s(case_bytes: int, timeout_s: float) -> float:
    """The twin's wait budget for a case that moves ``case_bytes`` (all PEs' rows) under a run limit of
    ``timeout_s``: max(:data:`WAIT_FLOOR_S`, 4 x case_bytes / :data:`TWIN_BYTES_PER_S`) seconds, at most
    half the limit (the twin's own limit, ``COMBINE_TWIN_TIMEOUT_S``). A wait nobody answers (a kernel
    that waits for a masked slot) is reported that long after the last put landed
    (``COMBINE_TWIN_WAIT_S``, host/twin/twin_heap.cpp; docs/twin.md#2-sessions-and-cleanup)."""
    return round(min(max(WAIT_FLOOR_S, 4.0 * case_bytes / TWIN_BYTES_PER_S), max(1.0, 0.5 * timeout_s)), 1)


def failure_reason(stderr_tail: str) -> str:
    """The line of a failed PE's stderr that says why it failed: the twin's or the driver's last
    message (``twin: PE 0 core 1: status slot 3 on PE 1 was written by SDMA (... at file:line) ...``),
    not a protocol violation or a note that it stopped for another PE; '' when there is none."""
    said = [ln.strip() for ln in stderr_tail.splitlines()
            if ln.startswith(("twin: ", "combine_host: ")) and not ln.startswith("twin: protocol violation:")
            and " because PE " not in ln]
    return said[-1] if said else ""


def _wait_for_an_exit(procs: list[subprocess.Popen], codes: list[int | None], timeout_s: float) -> None:
    """Sleep until one of the PEs still running (``codes`` None) exits, or ``timeout_s`` passes.

    Waits on the PEs' pidfds where the kernel has them (Linux 5.3+): a launch is over when its last PE
    exits, not up to a poll interval later (half of 10 ms on average, per launch: a sweep makes
    hundreds). Elsewhere it sleeps ``timeout_s``."""
    fds: list[int] = []
    try:
        for proc, code in zip(procs, codes):
            if code is None:
                fds.append(os.pidfd_open(proc.pid))
        select.select(fds, [], [], timeout_s)
    except (AttributeError, OSError, ValueError):  # no pidfd_open here, or a pid already reaped
        time.sleep(timeout_s)
    finally:
        for fd in fds:
            os.close(fd)


def _kill_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def launch_pes(binary: Path, pes: int, argv_for_pe: Callable[[int], Sequence[str]], *, cwd: Path, log_dir: Path,
               timeout_s: float, env: dict[str, str] | None = None, session: str | None = None,
               tolerated_codes: Sequence[int] = (), unnoticed_codes: Sequence[int] = ()) -> list[PeOutcome]:
    """Run ``binary`` once per PE (``pes`` processes) and return each PE's outcome.

    Args:
        binary: the host driver.
        pes: number of PEs (processes), >= 1.
        argv_for_pe: the driver's arguments for PE ``r`` (without the program name).
        cwd: working folder of every PE.
        log_dir: where ``pe<r>.stdout`` / ``pe<r>.stderr`` are kept.
        timeout_s: limit for the whole run, seconds; the kernel's flag waits and the twin's own
            waits give up at 50% of it (``COMBINE_WAIT_TIMEOUT_S``, ``COMBINE_TWIN_TIMEOUT_S``), the
            driver's barrier of all PEs at 62.5%, the twin's barriers at 75%, so a hang is reported
            by the PE, core and slot that hang (the driver's exit status 7).
        env: extra environment variables.
        session: twin session name; default :func:`new_session`.
        tolerated_codes: exit statuses that are results, not failures (the driver's 2 for an
            x_out mismatch): they neither stop the other PEs nor raise.
        unnoticed_codes: exit statuses of failures the other PEs cannot see (the driver's 1: it
            refused its arguments or case files before SHMEM started): the others are stopped at once.

    When a PE fails, the others get :func:`stop_grace_s` (2 s) to stop by themselves (the twin's
    PEs exit with status 4 when they see a peer's failure), then they are killed; after a status
    in ``unnoticed_codes`` they are killed at once. Every PE gets ``COMBINE_LAB_LAUNCHER_PID``
    (this process) so that it dies with it (:func:`die_with_launcher`; the host driver does the same).
    Before starting, what dead launchers left behind is removed (:func:`remove_orphans`).

    Returns:
        One :class:`PeOutcome` per PE, in PE order, each with status 0 or a tolerated one.

    Raises:
        LaunchError: a PE exited non-zero (message names the PE, its status and stderr tail)
            or the run passed ``timeout_s`` (message names the PEs still running).
        KeyboardInterrupt: re-raised after cleanup.
    """
    if pes < 1:
        raise ParameterError(f"pes={pes}: must be >= 1", parameter="pes", value=pes)
    remove_orphans()
    session = _free_session(session)
    log_dir.mkdir(parents=True, exist_ok=True)
    run_env = _run_env(env, session, timeout_s)
    procs: list[subprocess.Popen] = []
    files: list = []
    try:
        _start_pes(binary, pes, argv_for_pe, cwd, log_dir, run_env, procs, files)
        first_failure = _wait_for_pes(procs, timeout_s, log_dir, session, tolerated_codes, unnoticed_codes)
        codes = [p.poll() for p in procs]
        for f in files:
            f.flush()
        failed = [pe for pe, c in enumerate(codes) if c != 0 and c not in tolerated_codes]
        if failed:
            raise _failure(procs, codes, failed, first_failure, log_dir)
        return [PeOutcome(pe, codes[pe], (log_dir / f"pe{pe}.stdout").read_text(errors="replace"),
                          (log_dir / f"pe{pe}.stderr").read_text(errors="replace")) for pe in range(pes)]
    finally:
        _clean_up(procs, files, session)


def _free_session(session: str | None) -> str:
    """``session`` (default a new one), refused if its segment exists: never touch another run's."""
    session = session or new_session()
    if shm_path(session).exists():
        # Never touch another run's segment: refuse before starting anything.
        raise LaunchError(f"session {session} is in use: {shm_path(session)} exists (another run, or a crashed "
                          f"one: remove the file if no run is using it)", parameter="session", value=session)
    return session


def _run_env(env: dict[str, str] | None, session: str, timeout_s: float) -> dict[str, str]:
    """Every PE's environment: ours, ``env``, the session, the launcher's pid, and the waits' limits
    (half of ``timeout_s`` unless ``env`` sets them) so that a hang is reported before the run's limit."""
    run_env = dict(os.environ)
    run_env.update(env or {})
    run_env["COMBINE_TWIN_SESSION"] = session
    run_env[LAUNCHER_PID_ENV] = str(os.getpid())
    run_env.setdefault("COMBINE_TWIN_TIMEOUT_S", f"{max(1.0, 0.5 * timeout_s):.1f}")
    # The driver bounds the kernel's flag waits, its stream sync and its barriers by the same
    # time, on both targets (host/combine_host.cpp; the twin's own waits by COMBINE_TWIN_TIMEOUT_S).
    run_env.setdefault("COMBINE_WAIT_TIMEOUT_S", run_env["COMBINE_TWIN_TIMEOUT_S"])
    return run_env


def _start_pes(binary: Path, pes: int, argv_for_pe: Callable[[int], Sequence[str]], cwd: Path, log_dir: Path,
               run_env: dict[str, str], procs: list[subprocess.Popen], files: list) -> None:
    """Start one process per PE, each in its own session, its output in ``log_dir``; appended to
    ``procs`` and ``files`` as they start, so that a failed start still cleans up the ones before it."""
    for pe in range(pes):
        out = open(log_dir / f"pe{pe}.stdout", "w")
        err = open(log_dir / f"pe{pe}.stderr", "w")
        files += [out, err]
        procs.append(subprocess.Popen([str(binary), *map(str, argv_for_pe(pe))], cwd=cwd, env=run_env,
                                      stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                      start_new_session=True))


def _wait_for_pes(procs: list[subprocess.Popen], timeout_s: float, log_dir: Path, session: str,
                  tolerated_codes: Sequence[int], unnoticed_codes: Sequence[int]) -> int | None:
    """Poll the PEs until all have exited, or one failed and the others had their grace (none for an
    unnoticed status, none left once only stopped PEs run). Returns the first PE that failed (None:
    none). Raises LaunchError (``timed_out``) past ``timeout_s``, naming the PEs still running."""
    deadline = time.monotonic() + timeout_s
    grace_s = stop_grace_s()
    first_failure: int | None = None
    failed_at = 0.0
    while True:
        codes = [p.poll() for p in procs]
        if all(c is not None for c in codes):
            return first_failure
        now = time.monotonic()
        if first_failure is None:
            bad = [pe for pe, c in enumerate(codes) if c is not None and c != 0 and c not in tolerated_codes]
            if bad:
                first_failure, failed_at = bad[0], now
                if codes[bad[0]] in unnoticed_codes:
                    return first_failure  # the others cannot notice: no use waiting for them
        if first_failure is not None and (now - failed_at > grace_s or all(
                c is not None or _is_stopped(p) for c, p in zip(codes, procs))):
            return first_failure  # the grace is over, or only stopped PEs are left: they never finish
        if now > deadline:
            raise _timed_out([pe for pe, c in enumerate(codes) if c is None], timeout_s, log_dir, session)
        _wait_for_an_exit(procs, codes, _POLL_S)


def _timed_out(running: list[int], timeout_s: float, log_dir: Path, session: str) -> LaunchError:
    """The error of a run past its limit: the PEs still ``running``, their stderr tails and the wait
    that gave up among them (PE, core, slot), ``parameter="timeout_s"``."""
    said = {pe: _tail(log_dir / f"pe{pe}.stderr") for pe in running}
    tails = "\n".join(f"--- PE {pe} stderr:\n{t}" for pe, t in said.items() if t)
    return LaunchError(f"timed out after {timeout_s:.1f} s: PEs {running} still running "
                       f"(session {session})\n{tails}", timed_out=True, parameter="timeout_s", value=timeout_s,
                       wait=next((w for w in map(wait_gave_up, said.values()) if w), None), stderr=said)


def _failure(procs: list[subprocess.Popen], codes: list[int | None], failed: list[int], first_failure: int | None,
             log_dir: Path) -> LaunchError:
    """The error of a failed run, naming its root cause: a PE stopped by a signal (the others waited
    for it), else the first that failed; status 4 is the twin's "stopped because another PE failed"."""
    stopped = [pe for pe in failed if codes[pe] is None and _is_stopped(procs[pe])]
    roots = [pe for pe in failed if codes[pe] not in (_STOPPED_BY_PEER, None)]
    origin = roots[0] if roots else (first_failure if first_failure is not None else failed[0])
    if first_failure in roots:
        origin = first_failure
    if stopped:
        origin = stopped[0]
    c = codes[origin]
    said = {pe: _tail(log_dir / f"pe{pe}.stderr", 200) for pe in dict.fromkeys([origin, *failed])}
    waits = [wait_gave_up(t) for t in said.values()]
    return LaunchError(_failure_text(origin, c, origin in stopped, failed, said), pe=origin, returncode=c,
                       wait=next((w for w in waits if w), None), stderr=said)


def _clean_up(procs: list[subprocess.Popen], files: list, session: str) -> None:
    """Whatever happened (a result, a failure, a timeout, Ctrl-C): kill every PE's process group,
    reap them, close their logs and remove the session's segment."""
    for p in procs:
        _kill_group(p)
    for p in procs:
        try:
            p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
    for f in files:
        f.close()
    try:
        shm_path(session).unlink()
    except FileNotFoundError:
        pass
