"""One name per file: each of reactq's files is known to Python by one path and one module name.

``worker/``, ``producer/`` and ``shared/`` are real folders at the repository's top and
``reactq/worker`` (etc.) link to them; the name every Python tool uses is the link's,
``reactq/worker/…`` for the module ``reactq.worker.…`` (docs/architecture.md, One name
per file). Each check runs in a fresh interpreter of this venv, as a developer would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINKED = ("worker", "producer", "shared")
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    # No PYTHONPATH: what imports is what the venv itself finds (pytest's own
    # pythonpath = ["."] is in this process only).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def _parent_folder(tmp_path: Path) -> Path:
    """A folder holding the checkout under the name ``reactq``, as its parent folder does."""
    (tmp_path / "reactq").symlink_to(ROOT, target_is_directory=True)
    return tmp_path


def test_the_package_imports_from_the_parent_folder_of_a_checkout(tmp_path: Path) -> None:
    # The folder named reactq there has no __init__.py: Python takes it for a namespace
    # package unless a later sys.path entry holds a regular reactq. The editable install
    # is that entry (a path in its .pth); an import-hook install is never asked, and
    # this failed with "cannot import name 'Agent' from 'reactq' (unknown location)".
    code = (
        "from reactq import Agent\n"
        "import reactq, reactq.worker\n"
        "print(reactq.__file__); print(reactq.worker.__file__); print(Agent.__module__)"
    )
    out = _python(code, _parent_folder(tmp_path))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [
        str(ROOT / "reactq" / "__init__.py"),
        str(ROOT / "reactq" / "worker" / "__init__.py"),
        "reactq.worker.definitions",
    ]


# A ValueError raised in a reactq.worker module; then every module loaded by then.
RAISE = """
import json, sys, traceback
import reactq.producer.client, reactq.worker.tasks  # most of the package, lazily imported
from reactq.worker.agent.guardrails import as_guardrails
try:
    as_guardrails("input_guardrails", 5)
except ValueError as exc:
    frames = [f.filename for f in traceback.extract_tb(exc.__traceback__)]
names = sorted(
    n for n in sys.modules if n.split(".")[0] in ("worker", "producer", "shared")
)
files = sorted(
    str(getattr(m, "__file__", None) or "")
    for n, m in list(sys.modules.items()) if n == "reactq" or n.startswith("reactq.")
)
print(json.dumps({"frames": frames, "bare": names, "files": files}))
"""


def test_a_traceback_names_each_file_by_one_path(tmp_path: Path) -> None:
    raised_in = str(ROOT / "reactq" / "worker" / "agent" / "guardrails.py")
    seen = []
    for cwd in (ROOT, tmp_path / "elsewhere", _parent_folder(tmp_path)):
        cwd.mkdir(exist_ok=True)
        out = _python(RAISE, cwd)
        assert out.returncode == 0, out.stderr
        seen.append(json.loads(out.stdout))
    # The same path from the checkout, from any folder and from the checkout's parent.
    assert seen[0] == seen[1] == seen[2]
    report = seen[0]
    assert report["frames"][-1] == raised_in
    assert report["bare"] == []  # no module under a second, top-level name
    # Every loaded reactq module by its import path: the real folders' paths never appear.
    files = [Path(f) for f in report["files"] if f]
    assert len(files) > 100
    assert all(f.is_relative_to(ROOT / "reactq") for f in files), files
    assert not any(f.is_relative_to(ROOT / name) for f in files for name in LINKED)


def test_pyright_checks_each_file_once_under_its_import_name() -> None:
    # Pyright does not descend into a linked folder unless `include` names it: reactq/
    # and each link, so every file is checked once, as reactq.<side>.…; an editor that
    # opens a file by its real path (worker/…) names it worker.…, so those paths'
    # diagnostics are ignored rather than reported against the wrong module name.
    links = sorted(p.name for p in (ROOT / "reactq").iterdir() if p.is_symlink())
    assert links == sorted(LINKED)
    pyright = PYPROJECT["tool"]["pyright"]
    assert pyright["include"] == ["reactq", *(f"reactq/{name}" for name in LINKED)]
    assert pyright["ignore"] == list(LINKED)
    for name in LINKED:
        assert (ROOT / "reactq" / name).resolve() == ROOT / name
        assert (ROOT / name / "__init__.py").is_file()


def test_the_editable_install_is_a_path_entry() -> None:
    # setuptools writes a path .pth (not an import hook) only for a package-dir of
    # {"" = "."} with every package where that path finds it: a package-dir entry per
    # side (reactq.worker = "worker") would bring the hook, and the failure above, back.
    assert PYPROJECT["tool"]["setuptools"]["package-dir"] == {"": "."}
    pth = Path(sysconfig.get_paths()["purelib"]).glob("__editable__.reactq-*.pth")
    assert [p.read_text().split() for p in pth] == [[str(ROOT)]]
