"""parity_tests/forkrun.py, the runner behind the lab-script and stubbed-chapter tests:
a job's exit status, output, environment and working directory are its own, with
or without ``os.fork``, and a job past the timeout is killed."""

from __future__ import annotations

import os

import pytest

from parity_tests import forkrun

SCRIPT = """
import os, sys
print("out", sys.argv[1:], os.environ.get("FORKRUN_TEST"), os.path.basename(os.getcwd()))
print("err", file=sys.stderr)
sys.exit(int(sys.argv[1]))
"""


def jobs(tmp_path):
    (tmp_path / "job.py").write_text(SCRIPT)
    (tmp_path / "boom.py").write_text("raise ValueError('boom')\n")
    env = {**os.environ, "FORKRUN_TEST": "mine"}
    return [
        {"name": "ok", "kind": "script", "argv": [str(tmp_path / "job.py"), "0"],
         "cwd": str(tmp_path), "env": env},
        {"name": "three", "kind": "script", "argv": [str(tmp_path / "job.py"), "3"],
         "cwd": str(tmp_path), "env": env},
        {"name": "boom", "kind": "script", "argv": [str(tmp_path / "boom.py")],
         "cwd": str(tmp_path)},
    ]  # fmt: skip


@pytest.mark.parametrize("fork", [True, False], ids=["fork", "no-fork"])
def test_jobs_keep_their_status_output_environment_and_directory(fork, tmp_path, monkeypatch):
    if not fork:
        monkeypatch.delattr(os, "fork", raising=False)
    elif not hasattr(os, "fork"):
        pytest.skip("no os.fork here")
    env = {k: v for k, v in os.environ.items() if k != "FORKRUN_TEST"}
    runs = forkrun.run_jobs(jobs(tmp_path), env=env, preload=["json"], parallel=2,
                            workdir=tmp_path / "logs")  # fmt: skip
    assert {k: r.returncode for k, r in runs.items()} == {"ok": 0, "three": 3, "boom": 1}
    folder = tmp_path.name
    assert runs["ok"].stdout == f"out ['0'] mine {folder}\n" and runs["ok"].stderr == "err\n"
    assert runs["three"].stdout == f"out ['3'] mine {folder}\n"
    assert "ValueError: boom" in runs["boom"].stderr


@pytest.mark.skipif(not hasattr(os, "fork"), reason="the driver forks")
def test_a_job_past_the_timeout_is_killed(tmp_path):
    (tmp_path / "sleep.py").write_text("import time\ntime.sleep(60)\n")
    job = {"name": "sleep", "kind": "script", "argv": [str(tmp_path / "sleep.py")],
           "cwd": str(tmp_path)}  # fmt: skip
    runs = forkrun.run_jobs([job], env=dict(os.environ), preload=[], parallel=1,
                            workdir=tmp_path / "logs", timeout=1)  # fmt: skip
    assert runs["sleep"].returncode == -9
    assert "forkrun: killed after" in runs["sleep"].stderr


def test_a_pytest_job_is_python_m_pytest(tmp_path):
    (tmp_path / "test_x.py").write_text(
        "def test_a():\n    assert 1\n\ndef test_b():\n    assert 0\n"
    )
    job = {"name": "t", "kind": "pytest", "cwd": str(tmp_path),
           "argv": ["-q", "-p", "no:cacheprovider", "-o", "addopts=", "test_x.py"]}  # fmt: skip
    runs = forkrun.run_jobs([job], env=dict(os.environ), preload=["pytest"], parallel=1,
                            workdir=tmp_path / "logs")  # fmt: skip
    assert runs["t"].returncode == 1, runs["t"].stdout + runs["t"].stderr
    assert "1 failed, 1 passed" in runs["t"].stdout


def test_a_job_fails_like_python_would(tmp_path):
    """sys.exit("message") prints the message; a missing cwd is the job's own error; the
    interpreter waits for a non-daemon thread before the job ends."""
    (tmp_path / "msg.py").write_text("import sys\nsys.exit('fatal: no corpus')\n")
    (tmp_path / "thread.py").write_text(
        "import threading, time\n"
        "threading.Thread(target=lambda: (time.sleep(0.5), print('thread done'))).start()\n"
    )
    cwd = str(tmp_path)
    jobs = [
        {"name": "msg", "kind": "script", "argv": [str(tmp_path / "msg.py")], "cwd": cwd},
        {"name": "cwd", "kind": "script", "argv": [str(tmp_path / "msg.py")],
         "cwd": str(tmp_path / "missing")},
        {"name": "thread", "kind": "script", "argv": [str(tmp_path / "thread.py")], "cwd": cwd},
    ]  # fmt: skip
    runs = forkrun.run_jobs(jobs, env=dict(os.environ), preload=[], parallel=3,
                            workdir=tmp_path / "logs")  # fmt: skip
    assert (runs["msg"].returncode, runs["msg"].stderr) == (1, "fatal: no corpus\n")
    assert runs["cwd"].returncode != 0 and "missing" in runs["cwd"].stderr
    assert (runs["thread"].returncode, runs["thread"].stdout) == (0, "thread done\n")
