"""The wheel a user installs: built from this checkout, installed into a fresh
virtualenv outside it, its console scripts run against the real Oxia + MinIO.

The virtualenv gets llog from the wheel only; its third-party dependencies
come from the test run's own virtualenv through a ``.pth`` file, so the test
needs no download beyond the build backend pip fetches for an isolated build.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import site
import subprocess
import sys
import threading
import venv
import zipfile
from pathlib import Path

import pytest

from devstack import die_with_parent_argv

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = ("llog-broker", "llog-compactor", "llog-vacuum", "llog-produce-job")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The built wheel and pip's build output."""
    src = tmp_path_factory.mktemp("src")
    # A clean copy of the tracked files: a build in the checkout would leave build/ behind.
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True).stdout
    for name in files.decode().split("\0"):
        if name and (REPO / name).is_file():
            (src / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, src / name)
    out = tmp_path_factory.mktemp("dist")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "--disable-pip-version-check",
         "-w", str(out), str(src)],
        capture_output=True, text=True, timeout=600,
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (path,) = out.glob("llog-*.whl")
    return path, built.stdout + built.stderr


@pytest.fixture(scope="module")
def installed(wheel: tuple[Path, str], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the wheel installed; returns its bin directory."""
    root = tmp_path_factory.mktemp("venv")
    venv.create(root, with_pip=False)
    bin_dir = root / "bin"
    done = subprocess.run(  # no PYTHONPATH: pip must not take the checkout for an installed llog
        [sys.executable, "-m", "pip", "--python", str(bin_dir / "python"), "install", "--no-deps",
         "--disable-pip-version-check", str(wheel[0])],
        capture_output=True, text=True, timeout=300, env=_env({}),
    )
    assert done.returncode == 0 and (bin_dir / "llog-broker").exists(), done.stdout + done.stderr
    target_site = subprocess.run(
        [str(bin_dir / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()
    (Path(target_site) / "llog-test-deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    return bin_dir


def _env(llog_env: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(llog_env)
    return env


def test_the_wheel_builds_without_warnings_and_holds_only_the_product(wheel):
    path, output = wheel
    # setuptools announces what will stop building (the table form of ``license`` ...) as
    # *DeprecationWarning banners; "byte-compiling is disabled" is pip's own wheel build note.
    warnings = [
        line for line in output.splitlines()
        if ("warning" in line.lower() or "deprecat" in line.lower()) and "byte-compiling is disabled" not in line
    ]
    assert warnings == []
    names = zipfile.ZipFile(path).namelist()
    tops = {name.split("/")[0] for name in names if not name.startswith("llog-")}
    assert tops == {"server", "devstack"}
    assert "server/openapi.yaml" in names
    entry_points = zipfile.ZipFile(path).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    for script in SCRIPTS:
        assert f"{script} =" in entry_points


def test_every_console_script_answers_help_outside_the_checkout(installed, tmp_path, llog_env):
    for script in SCRIPTS:
        done = subprocess.run(
            [str(installed / script), "--help"], cwd=tmp_path, env=_env(llog_env),
            capture_output=True, text=True, timeout=120,
        )
        assert done.returncode == 0, (script, done.stderr[-2000:])
        assert "usage:" in done.stdout


def test_the_installed_commands_produce_consume_compact_and_vacuum(installed, tmp_path, llog_env):
    env = _env(llog_env)
    code = subprocess.run(
        [str(installed / "python"), "-c", "import server, sys; print(server.__file__)"],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=True,
    ).stdout
    assert str(REPO) not in code and "site-packages" in code  # llog comes from the wheel
    assert Path(code.strip()).with_name("openapi.yaml").is_file()

    broker = subprocess.Popen(
        die_with_parent_argv([str(installed / "llog-broker"), "--port", "0"]),
        cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )
    try:
        box: dict[str, bytes] = {}
        reader = threading.Thread(target=lambda: box.setdefault("line", broker.stdout.readline()), daemon=True)
        reader.start()
        reader.join(120)
        assert box.get("line"), broker.stderr.read1(4000) if broker.poll() is not None else "no start line"
        info = json.loads(box["line"])
        conn = http.client.HTTPConnection(info["host"], info["port"], timeout=60)

        def post(path: str, doc: dict) -> dict:
            conn.request("POST", path, json.dumps(doc), {"Content-Type": "application/json"})
            reply = conn.getresponse()
            body = json.loads(reply.read())
            assert reply.status == 200, body
            return body

        topic = f"wheel-{os.getpid()}"
        post("/produce", {"topic_partitions": [{"topic": topic, "partition": 0, "records": ["a", "b", "c"]}]})
        got = post("/consume", {"topic_partitions": [{"topic": topic, "partition": 0, "fetch_offset": 1}],
                                "max_wait_ms": 0})
        (part,) = got["results"]
        assert [(r["offset"], r["value"]) for r in part["records"]] == [(1, "a"), (2, "b"), (3, "c")]
        conn.close()
    finally:
        broker.terminate()
        broker.wait(60)
    assert broker.returncode == 0

    compacted = subprocess.run(
        [str(installed / "llog-compactor"), "--once", "--targets", f"{topic}:0"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180,
    )
    assert compacted.returncode == 0, compacted.stderr[-2000:]
    assert json.loads(compacted.stdout.splitlines()[-1])["partitions"] >= 1
    vacuumed = subprocess.run(
        [str(installed / "llog-vacuum"), "--dry-run", "--json"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180,
    )
    assert vacuumed.returncode == 0, vacuumed.stderr[-2000:]
    json.loads(vacuumed.stdout)
