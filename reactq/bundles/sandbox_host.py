"""The host side of a bubblewrap run: its mounts, the probe at start-up, and, under a
worker running as root, the unprivileged host user the code runs as."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
from pathlib import Path

__all__ = [
    "SEAL",
    "as_user",
    "base_args",
    "code_uid",
    "hand_over",
    "sandbox_problem",
    "unreachable",
]

# Of /etc only what programs read: the trust store, not /etc/ssl/private nor /etc/shadow.
_ETC = (
    "/etc/alternatives",
    "/etc/ld.so.cache",
    "/etc/ssl/certs",
    "/etc/ssl/openssl.cnf",
    "/etc/localtime",
)
# After every mount: bwrap's own root and /dev are tmpfs, writable unless sealed.
SEAL = ["--remount-ro", "/dev", "--remount-ro", "/"]


def base_args(tmp_bytes: int) -> list[str]:
    """bwrap's arguments for every run but the workspace's mount: the namespaces, what of
    the host is mounted read-only, a private ``/tmp`` of ``tmp_bytes``."""
    args = ["--unshare-all", "--die-with-parent", "--new-session", "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "sbin", "lib", "lib64", "lib32"):
        if Path(f"/{name}").is_symlink():
            args += ["--symlink", os.readlink(f"/{name}"), f"/{name}"]
        elif Path(f"/{name}").is_dir():
            args += ["--ro-bind", f"/{name}", f"/{name}"]
    for path in _ETC:
        args += ["--ro-bind-try", path, path]
    args += ["--proc", "/proc", "--ro-bind", "/proc/sys", "/proc/sys", "--dev", "/dev"]
    args += ["--size", str(tmp_bytes), "--tmpfs", "/tmp"]
    args += ["--uid", "1000", "--gid", "1000", "--hostname", "sandbox", "--clearenv"]
    return args


def as_user(uid: int | None) -> list[str]:
    """The command prefix that drops a root worker's rights before bwrap runs."""
    if uid is None:
        return []
    return ["/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--"]


def code_uid(uid: int) -> int | None:
    """The host uid code runs as when it is not the worker's own (under a root worker)."""
    return uid if os.geteuid() == 0 else None


def sandbox_problem(bwrap: str = "bwrap", *, uid: int = 65534) -> str | None:
    """Why bubblewrap cannot sandbox code on this machine, or None when it can.

    ``uid`` is the host user code runs as under a root worker. Blocking (it runs
    bwrap once): call it at start-up, not on the event loop.
    """
    path = shutil.which(bwrap)
    if path is None:
        return f"bubblewrap is not installed ({bwrap!r} is not on PATH): apt-get install bubblewrap"
    host_uid = code_uid(uid)
    if host_uid is not None and not Path("/usr/bin/setpriv").exists():
        return "the worker runs as root and setpriv (util-linux) is missing to drop its rights"
    try:
        done = subprocess.run(
            [
                *as_user(host_uid),
                path,
                *base_args(1 << 20),
                *SEAL,
                "--",
                "/usr/bin/prlimit",
                "--nproc=8",
                "/bin/true",
            ],
            capture_output=True,
            timeout=20,
            cwd="/",
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap could not be run: {exc}"
    if done.returncode != 0:
        said = done.stderr.decode("utf-8", "replace").strip() or f"exit code {done.returncode}"
        who = f" as uid {host_uid}" if host_uid is not None else ""
        return f"bubblewrap cannot create its namespaces here{who} (user, pid, net): {said}"
    return None


def unreachable(root: Path, uid: int) -> Path | None:
    """The first directory on the way to ``root`` that ``uid`` may not walk through."""
    for path in reversed([root, *root.parents]):
        try:
            st = path.stat()
        except FileNotFoundError:
            return None  # made on first use, by the worker, with its own umask
        if st.st_uid == uid:
            allowed = st.st_mode & stat.S_IXUSR
        elif st.st_gid == uid:
            allowed = st.st_mode & stat.S_IXGRP
        else:
            allowed = st.st_mode & stat.S_IXOTH
        if not allowed:
            return path
    return None


def hand_over(root: Path, uid: int) -> None:
    """Give the workspace to the sandbox's uid: what the worker wrote there as root.

    ``fwalk`` works on directory fds and never follows a symbolic link, so a link the
    code left cannot turn this onto a file outside the workspace.
    """
    with contextlib.suppress(FileNotFoundError):
        if (st := root.lstat()).st_uid != uid or st.st_gid != uid:
            os.chown(root, uid, uid, follow_symlinks=False)
        for _, dirs, files, fd in os.fwalk(root, follow_symlinks=False):
            for name in (*dirs, *files):
                with contextlib.suppress(FileNotFoundError):
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                    if st.st_uid != uid or st.st_gid != uid:
                        os.chown(name, uid, uid, dir_fd=fd, follow_symlinks=False)
