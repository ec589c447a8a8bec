"""The wheel and the sdist, as PyPI and a user's application get them.

Both are built (without build isolation, so offline) from a copy of the files
git would put in a fresh clone; the wheel is then installed into a fresh
virtualenv inside a folder laid out like an application (its own ``worker.py``,
``shared/``, ``producer.py`` and ``examples/``), and the ``reactq`` command runs
a turn from there. The venv sees the dependencies of this repository's .venv
through a .pth file, not reactq itself: the test checks that the reactq it
imports is the installed wheel.
"""

from __future__ import annotations

import email.message
import email.parser
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
import zipfile
from dataclasses import dataclass
from pathlib import Path

import pytest
import trove_classifiers

ROOT = Path(__file__).resolve().parent.parent
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
VERSION = PYPROJECT["version"]
# The repository folders that ship as reactq.<name> (reactq/<name> links to them).
LINKED = ("worker", "producer", "shared")
# An application's own modules with the names reactq's folders have in the repository:
# importing any of them from reactq would be a bug, so each one refuses to load.
APP_FILES = ("worker.py", "producer.py", "shared/__init__.py", "examples/__init__.py")
REFUSE = "raise ImportError('reactq imported the application module {name}')\n"


def _run(
    args: list[str | Path], cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    out = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, f"{args} failed:\n{out.stdout}\n{out.stderr}"
    return out


def _clone(dest: Path) -> Path:
    """The files a fresh clone has (tracked, plus new files not ignored), as they are now."""
    listing = _run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT
    )
    for name in filter(None, listing.stdout.split("\0")):
        source, target = ROOT / name, dest / name
        if not source.is_symlink() and not source.is_file():
            continue  # deleted in the work tree, or a submodule
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_symlink():
            target.symlink_to(os.readlink(source))
        else:
            shutil.copy2(source, target)
    return dest


def _build(source: Path, outdir: Path, *kinds: str) -> None:
    out = _run(
        [sys.executable, "-m", "build", "--no-isolation", *kinds, "--outdir", outdir, source]
    )
    # pyproject.toml speaks current setuptools (an SPDX license expression, license-files):
    # the build warns about nothing in it.
    said = [
        line
        for line in (out.stdout + out.stderr).splitlines()
        if "Warning" in line or "deprecat" in line.lower()
    ]
    assert said == [], "\n".join(said)


@dataclass
class Dists:
    wheel: Path
    sdist: Path
    wheel_from_sdist: Path

    def names(self, wheel: Path | None = None) -> list[str]:
        with zipfile.ZipFile(wheel or self.wheel) as archive:
            return sorted(archive.namelist())

    def read(self, name: str) -> str:
        with zipfile.ZipFile(self.wheel) as archive:
            return archive.read(name).decode()


@pytest.fixture(scope="module")
def dists(tmp_path_factory: pytest.TempPathFactory) -> Dists:
    tmp = tmp_path_factory.mktemp("packaging")
    source = _clone(tmp / "clone")
    _build(source, tmp / "dist", "--sdist", "--wheel")
    (wheel,) = (tmp / "dist").glob("*.whl")
    (sdist,) = (tmp / "dist").glob("*.tar.gz")
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp / "unpacked", filter="data")
    (unpacked,) = (tmp / "unpacked").iterdir()
    _build(unpacked, tmp / "from-sdist", "--wheel")
    (again,) = (tmp / "from-sdist").glob("*.whl")
    return Dists(wheel, sdist, again)


def _metadata(dists: Dists) -> email.message.Message:
    return email.parser.Parser().parsestr(dists.read(f"reactq-{VERSION}.dist-info/METADATA"))


def test_the_wheel_holds_reactq_alone(dists: Dists) -> None:
    assert dists.wheel.name == f"reactq-{VERSION}-py3-none-any.whl"
    top = {name.split("/", 1)[0] for name in dists.names()}
    assert top == {"reactq", f"reactq-{VERSION}.dist-info"}
    # The sdist has everything the wheel needs: a wheel built from it is the same.
    assert dists.names(dists.wheel_from_sdist) == dists.names()


def test_twine_check_passes(dists: Dists) -> None:
    out = _run([sys.executable, "-m", "twine", "check", "--strict", dists.wheel, dists.sdist])
    assert out.stdout.count("PASSED") == 2, out.stdout


def test_metadata(dists: Dists) -> None:
    meta = _metadata(dists)
    assert (meta["Name"], meta["Version"]) == ("reactq", VERSION)
    assert meta["Description-Content-Type"] == "text/markdown"
    assert meta.get_payload().strip() == (ROOT / "README.md").read_text().strip()
    classifiers = meta.get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers and "Framework :: Celery" in classifiers
    assert [c for c in classifiers if c not in trove_classifiers.classifiers] == []
    assert meta["License-Expression"] == "MIT"
    assert meta.get_all("License-File") == ["LICENSE"]
    license_text = dists.read(f"reactq-{VERSION}.dist-info/licenses/LICENSE")
    assert license_text == (ROOT / "LICENSE").read_text()
    assert "MIT License" in license_text and "reactq developers" in license_text
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert {"Homepage", "Repository", "Issues", "Changelog"} <= set(urls)
    assert all(u.startswith("https://github.com/reactq/reactq") for u in urls.values())
    assert meta["Requires-Python"] == ">=3.11"
    assert {"mcp", "gateway", "dev"} <= set(meta.get_all("Provides-Extra") or [])
    entry_points = dists.read(f"reactq-{VERSION}.dist-info/entry_points.txt")
    assert "reactq = reactq.cli:main" in entry_points


def _shipped(path: Path) -> str:
    """Where a repository file lands in the wheel."""
    relative = path.relative_to(ROOT)
    if relative.parts[0] in LINKED:
        return f"reactq/{relative.as_posix()}"
    return relative.as_posix()


def test_typing_markers_modules_and_package_data_ship(dists: Dists) -> None:
    names = set(dists.names())
    assert {f"reactq/{p}py.typed" for p in ("", "worker/", "producer/", "shared/")} <= names
    expected: list[Path] = []
    for folder in ("reactq", *LINKED):
        for path in (ROOT / folder).rglob("*"):
            if "__pycache__" in path.parts or not path.is_file():
                continue
            if path.suffix in (".py", ".lua") or path.name == "py.typed":
                expected.append(path)
    expected += [p for p in (ROOT / "shared/state/migrations").rglob("*") if p.is_file()]
    expected += [p for p in (ROOT / "producer/static").rglob("*") if p.is_file()]
    missing = sorted(
        {_shipped(p) for p in expected if "__pycache__" not in p.parts and p.suffix != ".pyc"}
        - names
    )
    assert missing == []
    # Migrations, the gateway's page and the Lua scripts (when the tree has them) are there.
    assert "reactq/shared/state/migrations/alembic.ini" in names
    assert "reactq/producer/static/index.html" in names


def test_the_image_build_copies_what_the_build_reads() -> None:
    build_stage = (ROOT / "Dockerfile").read_text().split(" AS runtime")[0]
    copied: set[str] = set()
    for sources in re.findall(r"^COPY (.+) \S+$", build_stage, re.M):
        copied.update(sources.split())
    needed = {"pyproject.toml", PYPROJECT["readme"], *PYPROJECT["license-files"], "reactq"}
    assert needed | set(LINKED) <= copied


# --- installed into an application's folder -------------------------------------------


@pytest.fixture(scope="module")
def app(dists: Dists, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("app")
    for name in APP_FILES:
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(REFUSE.format(name=name))
    venv = folder / ".venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", python, "--disable-pip-version-check"]
    _run([*pip, "install", "--quiet", "--no-deps", "--no-index", dists.wheel])
    # Only now (pip must not see the repository's .venv): the dependencies, by a .pth file.
    # A plain path line adds that folder, not the .pth files in it (its editable reactq).
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    deps = sysconfig.get_paths()["purelib"]
    (Path(site.stdout.strip()) / "reactq_test_deps.pth").write_text(deps + "\n")
    return folder


def _app_env(folder: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("OPENAI_", "REACTQ_", "PYTHON", "VIRTUAL_ENV"))
    }
    env["PATH"] = f"{folder / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    return env


def test_the_installed_wheel_is_what_imports(app: Path) -> None:
    code = (
        "import reactq, reactq.worker, reactq.producer, reactq.shared, reactq.cli, sys\n"
        "print(reactq.__file__); print(reactq.worker.__file__); print(reactq.__version__)\n"
        "print(reactq.MCPClient.__module__, reactq.create_app.__module__)\n"
        "print(sorted(m for m in ('worker', 'producer', 'shared', 'examples') if m in sys.modules))"
    )
    out = _run([app / ".venv/bin/python", "-c", code], cwd=app, env=_app_env(app))
    reactq_file, worker_file, version, extras, bare = out.stdout.splitlines()
    site = app / ".venv" / "lib"
    assert Path(reactq_file).is_relative_to(site), reactq_file
    assert Path(worker_file).is_relative_to(site), worker_file
    assert version == VERSION
    assert extras == "reactq.worker.agent.mcp.client reactq.producer.gateway.factory"
    assert bare == "[]"


def test_a_turn_runs_from_the_application_folder(app: Path) -> None:
    env = _app_env(app)
    reactq = app / ".venv" / "bin" / "reactq"
    question = "What's the weather in Paris?"
    out = _run([reactq, "run", question, "--agents", "reactq.demo.weather:agent"], cwd=app, env=env)
    assert "offline demo model" in out.stderr
    assert 'get_weather(city="Paris")' in out.stdout
    assert "completed" in out.stdout.splitlines()[-1]

    # The default state lives in the user's data directory (the suite's own, see
    # conftest), not beside the app; the demo keeps its sessions out of it.
    state = Path(env["XDG_DATA_HOME"]) / "reactq" / "state.db"
    assert state.exists() and not (app / ".reactq" / "state.db").exists()
    demo = _run([reactq, "demo", "--in-process", "--sessions", "1"], cwd=app, env=env)
    assert "completed" in demo.stdout


# --- installed with the base dependencies only (no extra) ---------------------------


def _base_closure() -> set[str]:
    """Normalized names of the distributions ``pip install reactq`` brings (no extra)."""
    from importlib import metadata

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    seen: set[str] = set()
    todo: list[tuple[str, frozenset[str]]] = [("reactq", frozenset())]
    while todo:
        name, extras = todo.pop()
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # a marker for another platform or Python
        key = f"{canonicalize_name(name)}[{','.join(sorted(extras))}]"
        if key in seen:
            continue
        seen.add(key)
        for line in dist.requires or []:
            req = Requirement(line)
            wanted = req.marker is None or any(
                req.marker.evaluate({"extra": e}) for e in ("", *extras)
            )
            if wanted:
                todo.append((req.name, frozenset(req.extras)))
    return {key.split("[")[0] for key in seen} - {"reactq"}


def _base_site(dest: Path) -> Path:
    """A folder that holds links to the base dependencies' files of this .venv, nothing else."""
    from importlib import metadata

    from packaging.utils import canonicalize_name

    dest.mkdir()
    wanted = _base_closure()
    for dist in metadata.distributions():
        if canonicalize_name(dist.metadata["Name"]) not in wanted:
            continue
        for top in {
            f.parts[0] for f in dist.files or [] if f.parts[0] not in ("..", "__pycache__")
        }:
            source = Path(str(dist.locate_file(top)))
            if source.exists() and not (dest / top).exists():
                (dest / top).symlink_to(source)
    return dest


@pytest.fixture(scope="module")
def base_python(dists: Dists, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("base")
    venv = folder / ".venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    pip: list[str | Path] = [sys.executable, "-m", "pip", "--python", python, "-q"]
    _run([*pip, "--disable-pip-version-check", "install", "--no-deps", "--no-index", dists.wheel])
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    deps = _base_site(folder / "base-deps")
    (Path(site.stdout.strip()) / "reactq_test_deps.pth").write_text(f"{deps}\n")
    return python


def test_import_star_works_without_any_extra(base_python: Path, tmp_path: Path) -> None:
    absent = ("fastapi", "uvicorn", "mcp", "flower", "prometheus_client", "opentelemetry", "PIL")
    code = (
        "import importlib.util, json\n"
        "from reactq import *\n"
        "import reactq\n"
        "starred = [n for n in ('create_app', 'MCPClient') if n in globals()]\n"
        "missing = [n for n in reactq.__all__ if n not in globals()]\n"
        f"present = [m for m in {absent!r} if importlib.util.find_spec(m)]\n"
        "said = {}\n"
        "for name in ('create_app', 'MCPClient', 'MCPProvider'):\n"
        "    try:\n"
        "        exec(f'from reactq import {name}')\n"
        "    except ImportError as exc:\n"
        "        said[name] = str(exc)\n"
        "try:\n"
        "    reactq.create_app\n"
        "except ImportError as exc:\n"
        "    said['reactq.create_app'] = str(exc)\n"
        "print(json.dumps([missing, present, said, Agent.__module__, starred]))\n"
    )
    out = _run([base_python, "-c", code], cwd=tmp_path, env=_app_env(tmp_path))
    missing, present, said, agent_module, starred = json.loads(out.stdout)
    assert starred == []  # the extras' names are imported by name only
    assert present == []  # the venv really has no extra
    assert missing == []
    assert agent_module == "reactq.worker.definitions"
    assert "pip install 'reactq[gateway]'" in said["create_app"]
    assert "pip install 'reactq[gateway]'" in said["reactq.create_app"]
    assert "pip install 'reactq[mcp]'" in said["MCPClient"]
    assert "pip install 'reactq[mcp]'" in said["MCPProvider"]


def _one_error_line(out: subprocess.CompletedProcess[str], *needles: str) -> None:
    lines = out.stderr.strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stderr
    assert lines[0].startswith("reactq: error: ") and lines[0].endswith("[config_error]")
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_a_missing_extra_is_one_line_naming_it(base_python: Path, tmp_path: Path) -> None:
    reactq = base_python.parent / "reactq"
    env = {**_app_env(tmp_path), "OPENAI_API_KEY": "unused"}
    out = subprocess.run(
        [reactq, "serve"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60
    )
    _one_error_line(out, "'gateway' extra", "pip install 'reactq[gateway]'")
    pg = {**env, "REACTQ_DATABASE_URL": "postgresql+asyncpg://reactq@127.0.0.1:9/reactq"}
    out = subprocess.run(
        [reactq, "history", "s"], cwd=tmp_path, env=pg, capture_output=True, text=True, timeout=60
    )
    _one_error_line(out, "'postgres' extra", "pip install 'reactq[postgres]'")
    # From Python, the same ConfigError.
    code = (
        "import asyncio\n"
        "from reactq.shared.errors import ConfigError\n"
        "from reactq.shared.state import open_store\n"
        "try:\n"
        "    asyncio.run(open_store('postgresql+asyncpg://reactq@127.0.0.1:9/reactq'))\n"
        "except ConfigError as exc:\n"
        "    print(exc.details['extra'])\n"
    )
    out = _run([base_python, "-c", code], cwd=tmp_path, env=env)
    assert out.stdout.strip() == "postgres"


def _install_lines() -> list[str]:
    """The README's install lines, in order."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("<!-- install-lines:", 1)[1].split("```", 2)[1]
    return [line.split("  #")[0].strip() for line in block.splitlines() if line.startswith("pip ")]


def test_the_readme_install_lines_work(dists: Dists, tmp_path: Path) -> None:
    """Each line as the README gives it, with the checkout, the repository's URL and the
    wheel's folder standing for this run's: pip resolves reactq and its extras."""
    lines = _install_lines()
    assert [line.split()[:2] for line in lines] == [["pip", "install"]] * 2 + [
        ["pip", "wheel"],
        ["pip", "install"],
    ]
    checkout = _clone(tmp_path / "checkout")
    for git in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t",
                "commit", "-qm", "a commit"]):  # fmt: skip
        _run(["git", *git], cwd=checkout)
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", venv])
    python = venv / "bin" / "python"
    site = _run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    # The base dependencies are there already (so the run stays short); pip must still
    # build reactq from each source and bring each extra's own (asyncpg, fastapi ...).
    (Path(site.stdout.strip()) / "reactq_test_deps.pth").write_text(
        f"{_base_site(tmp_path / 'base-deps')}\n"
    )
    pip = [str(sys.executable), "-m", "pip", "--python", str(python), "-q"]
    check = (
        "import importlib.metadata as m, reactq, asyncpg, fastapi\n"
        "print(reactq.__version__, m.distribution('reactq').read_text('direct_url.json'))"
    )
    for line in lines:
        command = (
            line.replace("/path/to/reactq", str(checkout))
            .replace("git+https://github.com/reactq/reactq", f"git+file://{checkout}")
            .replace("dist/", f"{tmp_path / 'dist'}/")
        )
        args = shlex.split(command)[2:]
        if command.startswith("pip wheel"):
            _run([*pip, "wheel", *args], cwd=tmp_path)
            assert (tmp_path / "dist" / dists.wheel.name).exists()
            continue
        subprocess.run([*pip, "uninstall", "-y", "reactq"], capture_output=True, timeout=120)
        _run([*pip, "install", *args], cwd=tmp_path)
        out = _run([python, "-c", check], cwd=tmp_path, env=_app_env(tmp_path))
        version, _, origin = out.stdout.partition(" ")
        assert version == VERSION
        if "git+" in command:
            assert '"vcs": "git"' in origin
        elif "-e" in command.split():
            assert '"editable": true' in origin
        else:
            assert dists.wheel.name in origin
