"""Run many short Python jobs, each in a fresh forked child of one warm process.

The lab scripts and the stubbed chapters' ``pytest`` runs are separate processes
on purpose (a learner runs them that way, and each stubbed chapter needs its own
``numpy_impl``), but a fresh interpreter spends ~3 s of CPU importing torch,
Hypothesis and matplotlib before doing anything. Here one driver process imports
those once, then forks a child per job: each child starts from that state (no
``numpy_impl``, ``torch_impl``, ``labs`` or test module imported yet), takes the
job's environment, working directory and argv, and runs either ``pytest.main``
(as ``python -m pytest ARGS``) or a script (as ``python SCRIPT``).

    python -m parity_tests.forkrun JOBS.json

JOBS.json: ``{"preload": [modules], "parallel": N, "timeout": seconds, "jobs":
[{"name", "kind": "pytest" | "script", "argv", "cwd", "env", "stdout", "stderr"}]}``
(``env`` replaces the environment; library settings read at import time, such
as ``OMP_NUM_THREADS`` or ``MPLBACKEND``, come from the driver's own environment).
Prints one JSON object: name -> {"returncode", "seconds", "timed_out"}; a job
past the timeout is killed with its process group (returncode -9), and
:func:`run_jobs` adds a line saying so to its stderr.

POSIX only (``os.fork``); :func:`run_jobs` falls back to one subprocess per job
elsewhere. The driver itself is started with ``subprocess``, never forked from the
pytest process: a pytest-xdist worker runs threads, and forking a threaded
process is unsafe.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import runpy
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path


def _child(job: dict) -> None:
    """In the forked child: become the job, run it, exit with its status."""
    os.setpgrp()  # its own process group: a timeout kills what it started, too
    for fd, path in ((1, job["stdout"]), (2, job["stderr"])):
        f = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(f, fd)
        os.close(f)
    code = 1
    try:
        os.chdir(job["cwd"])
        os.environ.clear()
        os.environ.update(job["env"])
        if job["kind"] == "pytest":
            import pytest

            sys.argv = ["pytest", *job["argv"]]
            sys.path.insert(0, job["cwd"])  # what `python -m` puts first
            code = int(pytest.main(job["argv"]))
        else:
            script = str(Path(job["argv"][0]).resolve())
            sys.argv = [script, *job["argv"][1:]]
            sys.path.insert(0, str(Path(script).parent))  # what `python SCRIPT` puts first
            try:
                runpy.run_path(script, run_name="__main__")
                code = 0
            except SystemExit as e:  # as the interpreter would: sys.exit("msg") prints msg
                if e.code is None or isinstance(e.code, int):
                    code = e.code or 0
                else:
                    print(e.code, file=sys.stderr)
                    code = 1
    except BaseException:
        traceback.print_exc()
        code = 1
    finally:
        try:
            threading._shutdown()  # wait for non-daemon threads, as interpreter exit does
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def drive(spec: dict) -> dict:
    """Fork ``spec["parallel"]`` children at a time; return name -> outcome."""
    for name in spec.get("preload", []):
        importlib.import_module(name)
    pending = list(spec["jobs"])
    running: dict[int, tuple[dict, float]] = {}
    timed_out: set[int] = set()
    results: dict[str, dict] = {}
    timeout = float(spec.get("timeout", 600))
    while pending or running:
        while pending and len(running) < max(1, int(spec.get("parallel", 2))):
            job = pending.pop(0)
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                try:
                    _child(job)
                finally:  # never let a child fall back into this loop
                    os._exit(1)
            running[pid] = (job, time.monotonic())
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            for child, (_job, started) in list(running.items()):
                if time.monotonic() - started > timeout and child not in timed_out:
                    timed_out.add(child)
                    try:
                        os.killpg(child, signal.SIGKILL)  # the job and what it started
                    except ProcessLookupError:  # gone (or not yet its own group leader)
                        os.kill(child, signal.SIGKILL)
            time.sleep(0.02)
            continue
        job, started = running.pop(pid)
        results[job["name"]] = {
            "returncode": os.waitstatus_to_exitcode(status),
            "seconds": round(time.monotonic() - started, 2),
            "timed_out": pid in timed_out,
        }
    return results


def run_jobs(
    jobs: list[dict],
    *,
    env: dict[str, str],
    preload: list[str],
    parallel: int,
    workdir: Path,
    timeout: float = 600,
) -> dict[str, subprocess.CompletedProcess]:
    """Run ``jobs`` (the dicts above; ``env`` defaults to the driver's ``env``, and
    ``stdout``/``stderr`` to files in ``workdir``) through one driver process; return
    name -> CompletedProcess (args, returncode, stdout, stderr)."""
    workdir.mkdir(parents=True, exist_ok=True)
    for job in jobs:
        job.setdefault("env", env)
        job.setdefault("stdout", str(workdir / f"{job['name']}.out"))
        job.setdefault("stderr", str(workdir / f"{job['name']}.err"))
    if hasattr(os, "fork"):
        spec = workdir / "jobs.json"
        spec.write_text(json.dumps({"preload": preload, "parallel": parallel,
                                    "timeout": timeout, "jobs": jobs}))  # fmt: skip
        r = subprocess.run(
            [sys.executable, "-m", "parity_tests.forkrun", str(spec)],
            cwd=Path(__file__).resolve().parent.parent,
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout * (len(jobs) + 1),
        )
        if r.returncode != 0:
            raise RuntimeError(f"forkrun driver failed ({r.returncode}):\n{r.stderr[-4000:]}")
        outcomes = json.loads(r.stdout)
        codes = {k: v["returncode"] for k, v in outcomes.items()}
        late = {k: v["seconds"] for k, v in outcomes.items() if v["timed_out"]}
    else:  # no fork: a plain subprocess per job, one at a time
        codes, late = {}, {}
        for job in jobs:
            head = ["-m", "pytest"] if job["kind"] == "pytest" else []
            started = time.monotonic()
            with open(job["stdout"], "w") as out, open(job["stderr"], "w") as err:
                try:
                    codes[job["name"]] = subprocess.run(
                        [sys.executable, *head, *job["argv"]], cwd=job["cwd"], env=job["env"],
                        stdout=out, stderr=err, timeout=timeout,
                    ).returncode  # fmt: skip
                except subprocess.TimeoutExpired:
                    codes[job["name"]] = -signal.SIGKILL
                    late[job["name"]] = round(time.monotonic() - started, 2)
                except OSError as e:  # a cwd or interpreter that is not there
                    print(f"forkrun: could not start the job: {e}", file=err)
                    codes[job["name"]] = 1
    for name, seconds in late.items():  # say so where the test's message will show it
        with open(next(j["stderr"] for j in jobs if j["name"] == name), "a") as err:
            print(f"\nforkrun: killed after {seconds} s (timeout {timeout} s)", file=err)
    return {
        job["name"]: subprocess.CompletedProcess(
            job["argv"],
            codes[job["name"]],
            Path(job["stdout"]).read_text(errors="replace"),
            Path(job["stderr"]).read_text(errors="replace"),
        )
        for job in jobs
    }


if __name__ == "__main__":
    print(json.dumps(drive(json.loads(Path(sys.argv[1]).read_text()))))
