"""run_code / run_file in bubblewrap: what the code may do, what it may not, and that a
run that breaks a limit is stopped and leaves the next call working."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from reactq.bundles.sandbox import SandboxLimits, sandbox_problem, sandbox_tools
from reactq.bundles.workspace import WorkspaceError
from reactq.shared.settings import Settings
from reactq.worker.agent.tools import Tool, ToolContext

PROBLEM = sandbox_problem()
needs_bwrap = pytest.mark.skipif(PROBLEM is not None, reason=f"no sandbox here: {PROBLEM}")

CTX = ToolContext(session_id="code-1", turn_id="t_1")
LIMITS = SandboxLimits(wall_seconds=6, cpu_seconds=3, output_bytes=2000, max_processes=32)
QUOTA = 3_000_000


def _tools(
    root: Path, sandbox: str = "bwrap", limits: SandboxLimits = LIMITS, cgroup: str | None = None
) -> dict[str, Tool]:
    settings = Settings.from_env(
        {},
        workspace_root=str(root),
        workspace_quota_bytes=QUOTA,
        sandbox=sandbox,
        sandbox_cgroup=cgroup,
    )
    return {t.name: t for t in sandbox_tools(settings, limits=limits)}


async def call(tools: dict[str, Tool], name: str, **args: Any) -> str:
    result = await tools[name].call(args, CTX)
    return str(result)


def _alive(marker: str) -> list[int]:
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if marker.encode() in cmdline:
            found.append(int(pid))
    return found


def _uids(marker: str) -> set[str]:
    """The ``Uid:`` lines, as the host sees them, of the processes with ``marker``."""
    found = set()
    for pid in _alive(marker):
        with contextlib.suppress(OSError):
            status = Path(f"/proc/{pid}/status").read_text()
            found |= {line for line in status.splitlines() if line.startswith("Uid:")}
    return found


@pytest.fixture
def tmp_path() -> Iterator[Path]:
    """A directory the sandbox's uid can reach: pytest's own are its user's alone (0700),
    and under a root worker the code runs as another uid."""
    root = Path(tempfile.mkdtemp(prefix="reactq-sandbox-test-"))
    root.chmod(0o755)
    yield root
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def tools(tmp_path: Path) -> dict[str, Tool]:
    return _tools(tmp_path)


def test_the_tools_write_alone(tools: dict[str, Tool]) -> None:
    if not tools:
        pytest.skip(f"no sandbox here: {PROBLEM}")
    assert {n: t.writes for n, t in tools.items()} == {"run_code": True, "run_file": True}


@needs_bwrap
async def test_code_runs_in_the_workspace_and_keeps_its_files(
    tools: dict[str, Tool], tmp_path: Path
) -> None:
    out = await call(
        tools, "run_code", code="open('made.txt', 'w').write('hi')\nprint('done', 6 * 7)"
    )
    assert out.startswith("[exit code 0;") and "done 42" in out
    assert (tmp_path / "code-1" / "made.txt").read_text() == "hi"
    (tmp_path / "code-1" / "tool.sh").write_text('echo "args: $*"; exit 3\n')
    out = await call(tools, "run_file", path="tool.sh", args=["a", "b c"])
    assert "[exit code 3;" in out and "args: a b c" in out
    with pytest.raises(WorkspaceError, match=r"'\.\.' is not allowed"):
        await call(tools, "run_file", path="../x.py")


@needs_bwrap
async def test_a_traceback_at_the_end_survives_the_cut(tools: dict[str, Tool]) -> None:
    out = await call(
        tools, "run_code", code="for i in range(50000): print(i)\nraise KeyError('late')"
    )
    assert "[exit code 1;" in out
    assert out.index("0\n1\n2\n") < out.index("bytes cut") < out.index("KeyError: 'late'")
    assert len(out) < 3000


@needs_bwrap
async def test_a_file_outside_the_workspace_cannot_be_read_or_written(
    tools: dict[str, Tool], tmp_path: Path
) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("top secret")
    code = (
        "import os\n"
        f"for path in ['/etc/passwd', {str(secret)!r}, '/root/.bashrc']:\n"
        "    print(path, os.path.exists(path))\n"
        "for path in ['/usr/evil', '/evil', '/dev/evil', '/proc/sys/kernel/hostname']:\n"
        "    try:\n"
        "        open(path, 'w').write('x')\n"
        "        print('WROTE', path)\n"
        "    except OSError as exc:\n"
        "        print('refused', path, exc.errno)\n"
    )
    out = await call(tools, "run_code", code=code)
    assert "[exit code 0;" in out
    assert "/etc/passwd False" in out and f"{secret} False" in out and "WROTE" not in out
    assert out.count("refused") == 4


@needs_bwrap
async def test_no_network(tools: dict[str, Tool]) -> None:
    code = (
        "import socket\n"
        "for host in [('1.1.1.1', 80), ('127.0.0.1', 6379)]:\n"
        "    try:\n"
        "        socket.create_connection(host, timeout=3)\n"
        "        print('CONNECTED', host)\n"
        "    except OSError as exc:\n"
        "        print('refused', exc.errno)\n"
    )
    out = await call(tools, "run_code", code=code)
    assert "CONNECTED" not in out and out.count("refused") == 2, out


@needs_bwrap
async def test_a_fork_bomb_is_contained(tmp_path: Path) -> None:
    # CPU time past the wall clock's reach (one CPU for 6 s): the bombs meet the process
    # and the wall-time limits, not the CPU time of the run as a whole.
    tools = _tools(tmp_path, limits=dataclasses.replace(LIMITS, cpu_seconds=30))
    out = await call(tools, "run_code", language="bash", code=":(){ :|:& };:; sleep 2")
    assert "[limit struck: processes" in out, out
    # A bomb that never gives up runs into the wall clock, and every process dies.
    code = "import os, time\nwhile True:\n    try: os.fork()\n    except OSError: time.sleep(0.01)"
    started = time.monotonic()
    out = await call(tools, "run_code", code=code + "  # bomb-marker")
    assert "[killed;" in out and "[limit struck: wall time" in out, out
    assert time.monotonic() - started < LIMITS.wall_seconds + 5
    assert await call(tools, "run_code", code="print('after the bomb')") != ""
    assert "after the bomb" in await call(tools, "run_code", code="print('after the bomb')")


@needs_bwrap
async def test_cpu_and_memory_limits_strike(tools: dict[str, Tool]) -> None:
    out = await call(tools, "run_code", code="while True: pass")
    assert "[limit struck: CPU time" in out or "[limit struck: wall time" in out
    out = await call(tools, "run_code", code="x = bytearray(4 * 1024**3)")
    assert "[limit struck: memory" in out and "MemoryError" in out


@needs_bwrap
async def test_filling_the_disk_past_the_quota_is_stopped(
    tools: dict[str, Tool], tmp_path: Path
) -> None:
    out = await call(tools, "run_code", code="open('big', 'wb').write(b'x' * 10_000_000)")
    assert "[limit struck: disk" in out and "File too large" in out
    # Many files each under the limit: the quota's watchdog kills the run.
    code = "import os\nfor i in range(1000):\n    open(f'f{i}', 'wb').write(os.urandom(500_000))"
    out = await call(tools, "run_code", code=code)
    assert "[limit struck: disk" in out
    assert _on_disk(tmp_path / "code-1") <= QUOTA
    # The private /tmp is small and memory-backed: it is no way around the quota either.
    out = await call(tools, "run_code", code="open('/tmp/t', 'wb').write(b'x' * 100_000_000)")
    assert "[exit code 1;" in out
    # A full workspace still runs code, so the model can clean up.
    out = await call(tools, "run_code", language="bash", code="rm -f big f*; echo cleaned")
    assert "cleaned" in out
    assert "ok" in await call(tools, "run_code", code="open('small', 'w').write('ok'); print('ok')")


def _on_disk(folder: Path) -> int:
    """Bytes under ``folder`` as a disk holds them: files' sizes, 4096 a folder (the
    private folder's own two aside)."""
    total = -2 * 4096
    for root, dirs, files in os.walk(folder):
        total += 4096 * len(dirs) + sum(os.lstat(Path(root, f)).st_size for f in files)
    return total


@needs_bwrap
async def test_parallel_writers_past_the_quota_lose_what_they_wrote_last(
    tools: dict[str, Tool], tmp_path: Path
) -> None:
    """Issue 29 item 4: 60 parallel writers left 183 MB under a 20 MB quota (the watchdog
    struck, and kept the files)."""
    ws = tmp_path / "code-1"
    ws.mkdir()
    (ws / "mine.txt").write_text("written before the run\n")
    code = (
        "import os\n"
        "for i in range(24):\n"
        "    if os.fork() == 0:\n"
        "        os.makedirs(f'd{i}/' + 'e/' * 50, exist_ok=True)\n"
        "        with open(f'w{i}', 'wb') as f:\n"
        "            for _ in range(40):\n"
        "                f.write(b'x' * 65536)\n"
        "        os._exit(0)\n"
        "for _ in range(24):\n"
        "    os.wait()\n"
    )
    out = await call(tools, "run_code", code=code)
    assert "[limit struck: disk" in out and "[removed, to bring the workspace" in out
    assert _on_disk(ws) <= QUOTA
    assert (ws / "mine.txt").read_text() == "written before the run\n"
    assert "ok" in await call(tools, "run_code", code="print('ok')")


@needs_bwrap
async def test_empty_files_past_the_inode_limit_are_removed(tmp_path: Path) -> None:
    settings = Settings.from_env(
        {}, workspace_root=str(tmp_path), workspace_max_inodes=50, sandbox="bwrap"
    )
    tools = {t.name: t for t in sandbox_tools(settings, limits=LIMITS)}
    out = await call(tools, "run_code", code="for i in range(500): open(f'e{i}', 'w').close()")
    assert "[limit struck: disk" in out and "[removed, to bring the workspace" in out
    left = [p for p in (tmp_path / "code-1").iterdir() if p.name != ".reactq"]
    assert len(left) <= 50


@needs_bwrap
async def test_a_process_that_outlives_the_call_is_killed(tools: dict[str, Tool]) -> None:
    marker = f"daemon-marker-{os.getpid()}"
    code = (
        f"(setsid python3 -c 'import time; time.sleep(300)' {marker} </dev/null >/dev/null &)\n"
        f"nohup python3 -c 'import time; time.sleep(300)' {marker} >/dev/null 2>&1 &\n"
        "echo started"
    )
    out = await call(tools, "run_code", language="bash", code=code)
    assert "started" in out
    assert _alive(marker) == []


@needs_bwrap
async def test_calls_run_in_parallel_sessions_without_blocking_the_loop(
    tools: dict[str, Tool],
) -> None:
    import asyncio

    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    task = asyncio.create_task(ticker())
    try:
        out = await call(tools, "run_code", code="import time; time.sleep(1); print('slept')")
    finally:
        task.cancel()
    assert "slept" in out and ticks >= 10


async def test_unsandboxed_says_so_on_every_call(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="reactq.bundles"):
        tools = _tools(tmp_path, sandbox="none")
    assert "UNSANDBOXED" in caplog.text
    for _ in range(2):
        out = await call(tools, "run_code", code="print('plain')")
        assert out.startswith("[UNSANDBOXED: REACTQ_SANDBOX=none") and "plain" in out


def test_without_bubblewrap_the_tools_are_left_out_and_the_log_says_why(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = Settings.from_env({}, workspace_root=str(tmp_path))
    with caplog.at_level(logging.WARNING, logger="reactq.bundles"):
        assert sandbox_tools(settings, bwrap="no-such-bwrap") == []
    assert "run_code and run_file are not available" in caplog.text
    assert "bubblewrap is not installed" in caplog.text


def test_the_setting_is_checked() -> None:
    with pytest.raises(Exception, match="REACTQ_SANDBOX"):
        Settings.from_env({"REACTQ_SANDBOX": "docker"})
    with pytest.raises(Exception, match="wall_seconds"):
        SandboxLimits(wall_seconds=0)


@needs_bwrap
@pytest.mark.e2e
async def test_code_runs_on_a_real_worker_and_a_fork_bomb_or_a_memory_hog_leaves_it_working(
    redis_url: str, namespace: str, tmp_path: Path
) -> None:
    import asyncio
    import uuid

    from reactq.producer import Producer
    from reactq.worker.agent.llm.scripted_server import ScriptedServer
    from tests.code_agents import code_script
    from tests.helpers import scripted_pool

    root = tmp_path / "workspaces"
    with scripted_pool(
        redis_url,
        f"{namespace}-code",
        tmp_path,
        ScriptedServer(code_script),
        workers=1,
        agents="tests.code_agents:code",
        concurrency=4,
        REACTQ_WORKSPACE_ROOT=str(root),
    ) as (env, pool):
        session = f"code-{uuid.uuid4().hex[:8]}"
        async with Producer(Settings.from_env(env)) as producer:
            finals = []
            for message in ("write and run", "bomb", "allocate", "write and run"):
                handle = await producer.submit(session, message, agent="code")
                finals.append(await asyncio.wait_for(handle.result(timeout=60), 60))
        assert pool.procs[0].poll() is None
    assert [f.status for f in finals] == ["completed"] * 4, finals
    assert "[exit code 0;" in finals[0].text and "hello 42" in finals[0].text
    assert (root / session / "hello.py").exists()
    bomb, after = finals[1].text.split(" || ")
    assert "[limit struck: wall time" in bomb
    assert "the worker is fine" in after
    allocated, after = finals[2].text.split(" || ")
    assert "[limit struck: memory" in allocated and "as a whole" in allocated, allocated
    assert "the worker is fine" in after
    assert "hello 42" in finals[3].text


# --- the run bounded as a whole (reactq issue 29) ---------------------------------------

WHOLE = SandboxLimits(
    wall_seconds=15, cpu_seconds=2, memory_bytes=768 << 20, max_processes=32, output_bytes=2000
)
FORK_AND_ALLOCATE = """
import os, time
kids = []
for i in range(6):
    pid = os.fork()
    if pid == 0:
        block = b'x' * (500 << 20)
        print('child', i, 'holds 500 MB', flush=True)
        time.sleep(4)
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.waitpid(pid, 0)
print('all children done')
"""


def _mem_available() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no MemAvailable in /proc/meminfo")


@needs_bwrap
async def test_forked_children_share_one_memory_limit(tmp_path: Path) -> None:
    import asyncio
    import threading

    tools = _tools(tmp_path, limits=WHOLE)
    before = _mem_available()
    lowest = before
    done = threading.Event()

    def sample() -> None:
        nonlocal lowest
        while not done.wait(0.01):
            lowest = min(lowest, _mem_available())

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        out = await asyncio.wait_for(call(tools, "run_code", code=FORK_AND_ALLOCATE), 30)
    finally:
        done.set()
        sampler.join()
    drop = before - lowest
    # Slack for the interpreters themselves and for whatever else this machine runs meanwhile.
    assert drop <= WHOLE.memory_bytes + (384 << 20), f"the host lost {drop >> 20} MiB: {out}"
    assert "[limit struck: memory" in out and "as a whole" in out, out
    assert "all children done" not in out
    assert "after" in await call(tools, "run_code", code="print('after')")


BUSY_CHILDREN = """
import os, time
for i in range(4):
    if os.fork() == 0:
        while True:
            for _ in range(20000):
                pass
            with open(f'cpu{i}.tmp', 'w') as f:
                f.write(str(time.process_time()))
            os.replace(f'cpu{i}.tmp', f'cpu{i}')
for _ in range(4):
    os.wait()
"""


@needs_bwrap
async def test_busy_children_share_one_cpu_time_limit(tmp_path: Path) -> None:
    tools = _tools(tmp_path, limits=WHOLE)
    out = await call(tools, "run_code", code=BUSY_CHILDREN)
    used = [float(p.read_text()) for p in (tmp_path / "code-1").glob("cpu[0-9]")]
    assert len(used) == 4, out
    # Each child reports its own CPU time; the run's watchdog looks 5 times a second.
    assert sum(used) <= WHOLE.cpu_seconds + 1.0, f"{used} CPU-s in all: {out}"
    assert "[limit struck: CPU time" in out and "as a whole" in out, out


@needs_bwrap
@pytest.mark.skipif(os.geteuid() != 0, reason="the case of a worker running as root")
async def test_under_a_root_worker_the_code_is_no_host_root(
    tools: dict[str, Tool], tmp_path: Path
) -> None:
    import asyncio

    # A root-only file in a directory the sandbox binds (/usr, read-only).
    fd, secret = tempfile.mkstemp(dir="/usr/local/share", prefix="reactq-test-secret-")
    marker = f"uid-marker-{os.getpid()}"
    try:
        os.write(fd, b"root only")
        os.close(fd)
        (tmp_path / "code-1").mkdir(exist_ok=True)
        (tmp_path / "code-1" / "by-the-worker.txt").write_text("worker wrote this\n")
        code = (
            f"cat {secret} && echo READ-THE-SECRET\n"
            "ls /etc/ssl/private && echo LISTED-THE-KEYS\n"
            "test -e /etc/shadow && echo SHADOW-IS-THERE\n"
            "test -s /etc/ssl/certs/ca-certificates.crt && echo certificates-are-there\n"
            "echo appended >> by-the-worker.txt && cat by-the-worker.txt\n"
            f"python3 -c 'import time; time.sleep(3)' {marker}\n"
        )
        run = asyncio.create_task(call(tools, "run_code", language="bash", code=code))
        uids: set[str] = set()
        deadline = time.monotonic() + 10
        while not run.done() and time.monotonic() < deadline and not uids:
            uids = _uids(marker)
            await asyncio.sleep(0.05)
        out = await run
    finally:
        os.unlink(secret)
    assert uids == {"Uid:\t65534\t65534\t65534\t65534"}, (uids, out)
    assert "READ-THE-SECRET" not in out and "Permission denied" in out, out
    assert "LISTED-THE-KEYS" not in out and "SHADOW-IS-THERE" not in out, out
    assert "certificates-are-there" in out, out
    assert "worker wrote this\nappended" in out, out
    # The workspace is handed to the sandbox's uid before each run; links the code left
    # there are not followed out of it.
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "file").write_text("root's")
    code = f"ln -s {outside} dir-link; ln -s {outside}/file file-link; echo linked"
    assert "linked" in await call(tools, "run_code", language="bash", code=code)
    assert "again" in await call(tools, "run_code", code="print('again')")
    assert {(p.stat().st_uid, p.stat().st_gid) for p in (outside, outside / "file")} == {(0, 0)}


@needs_bwrap
async def test_without_a_cgroup_the_log_says_the_limits_hold_per_process(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    for setting, why in (("/no-such-cgroup", "cgroup v"), ("off", "REACTQ_SANDBOX_CGROUP=off")):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="reactq.bundles"):
            tools = _tools(tmp_path, cgroup=setting)
        assert "limited PER PROCESS only" in caplog.text and why in caplog.text, caplog.text
    # Per process, the limits still hold: the code's own uid caps its processes.
    out = await call(tools, "run_code", language="bash", code=":(){ :|:& };:; sleep 2")
    assert "[limit struck: processes" in out, out
    out = await call(tools, "run_code", code="x = bytearray(4 * 1024**3)")
    assert "[limit struck: memory" in out and "per process" in out, out
