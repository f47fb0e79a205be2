"""pytest set-up for the parity suite: import path, Hypothesis profiles, chapter markers.

Hypothesis profiles (``HYPOTHESIS_PROFILE=thorough python -m pytest parity_tests``):

* ``default``: 15 examples per property, quick enough for every CI run.
* ``thorough``: 300 examples per property, for a change to a backward pass.

Neither has a deadline (the first example pays for imports and warm-up) and
both print the blob that replays a failure (``@reproduce_failure``).

Two environment variables serve the exercises (``python -m labs check NN``,
docs/exercises.md):

* ``TWINFORMER_WORKSPACE=DIR``: test ``DIR/numpy_impl``, a learner's copy, instead
  of the repository's. DIR goes first on ``sys.path`` and ``numpy_impl`` is
  imported here, before any test module can import the repository's copy; the
  run's header names the file that was imported. Hypothesis keeps that run's
  failing examples in ``DIR/.hypothesis``.
* ``TWINFORMER_REPORT=FILE``: write FILE, JSON: every test's outcome, exception
  and the place in ``numpy_impl`` that raised it, and every ``assert_close``
  comparison of its last example (the failing one, for a failed property).
* ``TWINFORMER_READ_ONLY=1``: keep no failing examples in the workspace
  (``python -m labs grade`` reads learners' workspaces without writing into them).
* ``TWINFORMER_GRADE_FD=N`` (``python -m labs grade``): instead of FILE, the report goes
  to the grader's open file N, after the grader's token; that file first holds the token
  and the lines of each exercise region, read here before the learner's code loads, and
  the report lists the regions each test ran (``"regions"``).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase

# The suite runs from a checkout without `pip install -e .` too.
ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# `labs train --backend numpy` starts one rank per core by default: the suite's runs (and
# the commands they start) stay in one process unless a test asks for more (--processes)
os.environ.setdefault("TWINFORMER_PROCESSES", "1")

WORKSPACE_ENV = "TWINFORMER_WORKSPACE"
REPORT_ENV = "TWINFORMER_REPORT"
READ_ONLY_ENV = "TWINFORMER_READ_ONLY"
REPORT_PATH = os.environ.get(REPORT_ENV) or None
#: What the report file will hold; see pytest_sessionfinish.
REPORT: dict = {"numpy_impl": None, "tests": [], "collect_errors": [], "import_error": None}
GRADE: dict | None = None  # the grader's token, file and regions: TWINFORMER_GRADE_FD
if os.environ.get("TWINFORMER_GRADE_FD"):
    _fd = int(os.environ.pop("TWINFORMER_GRADE_FD"))
    GRADE = {**json.loads(os.pread(_fd, 1 << 20, 0)), "fd": _fd}
    os.ftruncate(_fd, 0)
    REPORT["regions"] = {}


def _write_report() -> None:
    if GRADE is not None:
        data = f"{GRADE['token']}\n{json.dumps(REPORT, default=str)}".encode()
        os.ftruncate(GRADE["fd"], 0)
        os.pwrite(GRADE["fd"], data, 0)
    if REPORT_PATH is None:
        return
    path = Path(REPORT_PATH)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(REPORT, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, path)


def _import_numpy_impl() -> Path:
    """Import ``numpy_impl``, from ``$TWINFORMER_WORKSPACE`` when that is set.

    Returns the package directory actually imported.
    """
    workspace = os.environ.get(WORKSPACE_ENV)
    if workspace:
        ws = Path(workspace).resolve()
        package = ws / "numpy_impl"
        if not (package / "__init__.py").is_file():
            raise pytest.UsageError(
                f"{WORKSPACE_ENV}={workspace}: {package} is not a package "
                "(python -m labs start NN makes a workspace)"
            )
        loaded = sys.modules.get("numpy_impl")
        if loaded is not None and Path(loaded.__file__).resolve().parent != package:
            raise pytest.UsageError(
                f"{WORKSPACE_ENV}: numpy_impl was already imported from {loaded.__file__}"
            )
        sys.path.insert(0, str(ws))
    try:
        import numpy_impl
    except Exception as e:  # the learner's code does not import: say where, then stop
        frames = traceback.extract_tb(e.__traceback__)
        if isinstance(e, SyntaxError) and e.filename:  # its place is not a frame
            frames.append(traceback.FrameSummary(e.filename, e.lineno or 0, "<module>"))
        REPORT["import_error"] = {
            "exception": type(e).__name__,
            "message": str(e),
            "where": _where(frames, package if workspace else ROOT / "numpy_impl"),
            "traceback": "".join(traceback.format_exception(e, limit=-4)),
        }
        _write_report()
        raise
    imported = Path(numpy_impl.__file__).resolve().parent
    if workspace and imported != package:
        raise pytest.UsageError(f"{WORKSPACE_ENV}: imported {imported}, not {package}")
    return imported


def _where(frames, package: Path) -> str | None:
    """``numpy_impl/attention.py:88 in scaled_dot_product_attention``: the last frame of
    ``frames`` inside ``package`` (SyntaxErrors carry their place themselves)."""
    for frame in reversed(frames):
        path = Path(frame.filename).resolve()
        if path.is_relative_to(package):
            rel = Path("numpy_impl", path.relative_to(package)).as_posix()
            return f"{rel}:{frame.lineno} in {frame.name}"
    return None


NUMPY_IMPL = _import_numpy_impl()
REPORT["numpy_impl"] = str(NUMPY_IMPL)

import torch  # noqa: E402  (after the path set-up, like the implementations)

settings.register_profile("default", max_examples=15, deadline=None, print_blob=True)
settings.register_profile("thorough", max_examples=300, deadline=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
if os.environ.get(WORKSPACE_ENV):
    # A learner's failing examples stay with the learner's code, and a failing property
    # skips Hypothesis' "explain" phase: it costs seconds per failure (~6 s instead of
    # 0.3 s for a stub's NotImplementedError) for a comment on the falsifying example.
    # TWINFORMER_READ_ONLY=1 (python -m labs grade): nothing is written into the workspace.
    read_only = os.environ.get(READ_ONLY_ENV) == "1"
    settings.register_profile(
        "workspace",
        parent=settings.default,
        database=None
        if read_only
        else DirectoryBasedExampleDatabase(NUMPY_IMPL.parent / ".hypothesis"),
        phases=[p for p in settings.default.phases if p.name != "explain"],
    )
    settings.load_profile("workspace")

#: One marker per chapter of the course, so a learner runs ``pytest -m ch04``. A
#: chapter's marker selects exactly the tests of the functions it has the learner
#: write (numpy_impl's ``### BEGIN SOLUTION chNN`` regions; docs/exercises.md).
CHAPTERS = {
    "ch01": "tokens: CharTokenizer.encode, decode",
    "ch02": "embeddings and linear maps: Embedding, Linear",
    "ch03": "scaled dot-product attention, forward and backward",
    "ch04": "multi-head (causal self-) attention",
    "ch05": "learned positional embeddings",
    "ch06": "feed-forward network and GELU (and the dropout it uses)",
    "ch07": "LayerNorm and the residual block",
    "ch08": "the GPT model",
    "ch09": "training: cross-entropy, AdamW, gradient clipping, the LR schedule",
    "ch10": "sampling: filter_logits, generate",
    "ch11": "tokenization: byte-level BPE, merge and encoding by rank",
    "ch12": "efficient attention: the online softmax (FlashAttention), the KV cache",
    "ch13": "positional encodings II: the sinusoidal encoding, rotary embeddings (RoPE)",
    "ch14": "normalisation II and SwiGLU: RMSNorm, SiLU, SwiGLU, the post-norm block",
    "ch15": "encoder models and classification: padding masks, MeanPool, TransformerClassifier",
    "ch16": "encoder-decoder: cross-attention, the decoder block, greedy decoding",
    "ch17": "real models: GPT-2's and nanoGPT's state dicts, the key renames, Conv1D transposes",
}


def pytest_configure(config: pytest.Config) -> None:
    for name, what in CHAPTERS.items():
        config.addinivalue_line("markers", f"{name}: {what}")
    # The suite's tensors are tiny: intra-op threads only add synchronisation, and
    # on a busy 2-core runner OpenMP's spinning threads made a 4-layer GPT's
    # forward + backward ~300x slower (0.5 s instead of 2 ms). One thread it is.
    torch.set_num_threads(1)
    workers = len(getattr(config.option, "tx", None) or [])
    if (REPORT_PATH or GRADE) and workers:
        raise pytest.UsageError(
            f"{REPORT_ENV}: the report is written by one process; add -n 0 "
            "(python -m labs check does)"
        )
    if workers > 1:
        # pytest-xdist is about to start its workers, and they inherit this environment:
        # one BLAS thread each, as above (two workers x two spinning OpenBLAS threads on
        # 2 cores took 40% more CPU time than one process). Subprocesses inherit it too.
        for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ.setdefault(var, "1")


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """xdist controller: gather each worker's tolerance summary (see pytest_sessionfinish)."""
    from parity_tests.tolerances import merge_reached

    merge_reached(getattr(node, "workeroutput", {}).get("reached", []))


@pytest.fixture(autouse=True)
def _torch_default_dtype_untouched():
    """Tests build float64 modules with ``dtype=``; none may change the global default."""
    before = torch.get_default_dtype()
    yield
    after = torch.get_default_dtype()
    assert after == before, f"a test changed torch's default dtype from {before} to {after}"


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    """Print the worst errors reached per comparison kind, to tighten tolerances by."""
    from parity_tests.tolerances import REACHED

    if not REACHED:
        return
    tr = terminalreporter
    tr.section("parity tolerances reached (worst over the session)")
    tr.write_line(
        f"{'kind':<14}{'dtype':<10}{'checks':>8}{'max abs diff':>15}"
        f"{'max|a-e|/max|e|':>17}{'fraction of tol':>17}"
    )
    for (kind, dtype), r in sorted(REACHED.items()):
        tr.write_line(
            f"{kind:<14}{dtype:<10}{r['checks']:>8}{r['max_abs']:>15.2e}"
            f"{r['max_normwise_rel']:>17.2e}{r['worst_fraction_of_tol']:>17.2e}"
        )
    if config.getoption("verbose") > 0:
        for (kind, dtype), r in sorted(REACHED.items()):
            tr.write_line(f"closest to its tolerance, {kind} {dtype}: {r['worst_check']}")


def pytest_report_header(config) -> list[str] | None:
    if os.environ.get(WORKSPACE_ENV):
        return [f"numpy_impl: {NUMPY_IMPL} (from {WORKSPACE_ENV})"]
    return None


# -- the report for python -m labs check (TWINFORMER_REPORT) ---------------------------
class _Comparisons:
    """The ``assert_close`` records of the running test, grouped by Hypothesis example.

    Hypothesis runs a property many times and, when one fails, replays the
    smallest failing example last (``is_final``): that replay's comparisons are
    the ones to show. A test without Hypothesis is one group.
    """

    def __init__(self) -> None:
        self.context = self.final = self.last = None

    def add(self, record: dict) -> None:
        context = _hypothesis_context()
        if self.last is None or context is not self.context:
            self.context, self.last = context, []
            if getattr(context, "is_final", False):
                self.final = self.last
        self.last.append(record)


def _hypothesis_context():
    from hypothesis.control import current_build_context, currently_in_test_context

    return current_build_context() if currently_in_test_context() else None


_RUNNING = _Comparisons()


def _first_leaf(exc: BaseException) -> BaseException:
    """The first exception inside an exception group (Hypothesis: several distinct bugs)."""
    while getattr(exc, "exceptions", None):
        exc = exc.exceptions[0]
    return exc


if REPORT_PATH is not None or GRADE is not None:
    from parity_tests import divergence, tolerances

    tolerances.ON_COMPARISON = lambda record: _RUNNING.add(record)

    def pytest_runtest_setup(item) -> None:
        global _RUNNING
        _RUNNING = _Comparisons()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(item, call):
        outcome = yield
        rep = outcome.get_result()
        if call.when != "call" and rep.passed:
            return  # setup and teardown that went well say nothing
        if call.when == "teardown" and not rep.failed:
            return
        entry = {
            "nodeid": item.nodeid,
            "outcome": rep.outcome if call.when == "call" else "error",
            "duration": rep.duration,
            "exception": None,
            "message": None,
            "notes": [],
            "where": None,
            "comparisons": [],
        }
        if hasattr(rep, "wasxfail"):
            entry["outcome"] = "xfailed" if rep.skipped else "xpassed"
        elif rep.skipped:
            entry["outcome"] = "skipped"
            if isinstance(rep.longrepr, tuple):  # (path, line, "Skipped: reason")
                entry["message"] = str(rep.longrepr[2]).removeprefix("Skipped: ")
        if call.excinfo is not None and not rep.skipped and not hasattr(rep, "wasxfail"):
            exc = call.excinfo.value
            leaf = _first_leaf(exc)
            entry["exception"] = type(leaf).__name__
            entry["message"] = str(leaf)[:3000]
            entry["notes"] = [str(n)[:500] for n in getattr(exc, "__notes__", [])][:8]
            entry["where"] = _where(traceback.extract_tb(leaf.__traceback__), NUMPY_IMPL)
            if leaf is not exc:
                entry["notes"].insert(0, f"{len(exc.exceptions)} distinct failures; the first:")
        uses_hypothesis = hasattr(getattr(item, "obj", None), "hypothesis")
        found = _DIVERGENCE.pop(item.nodeid, None)
        if rep.failed and found and Path(found["file"]).is_relative_to(NUMPY_IMPL):
            rel = Path(found["file"]).relative_to(NUMPY_IMPL).as_posix()
            found["where"] = f"numpy_impl/{rel}:{found.pop('line')}"
            hints = [c["hint"] for c in _comparisons(rep, uses_hypothesis) if not c["passed"]]
            found["catalogued"] = any(h and not h.startswith(tolerances.SYMPTOMS) for h in hints)
            entry["divergence"] = found
        entry["comparisons"] = _comparisons(rep, uses_hypothesis)
        REPORT["tests"].append(entry)

    def _comparisons(rep, uses_hypothesis: bool) -> list:
        return (_RUNNING.final if rep.failed and uses_hypothesis else _RUNNING.last) or []

    _DIVERGENCE: dict = {}  # nodeid -> the first divergence of its failing example
    TEST_SECONDS = 120

    class TookTooLong(BaseException):  # not an Exception: Hypothesis does not shrink it
        pass

    def _took_too_long(signum, frame):
        raise TookTooLong(f"the test did not end in {TEST_SECONDS} s: an endless loop?")

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(item):
        """A failing example of a chapter's test runs once more, traced (divergence.py);
        for the grader, the exercise regions each test runs are recorded."""
        chapters = {m.name[2:] for m in item.iter_markers() if m.name in CHAPTERS}
        targets = _targets(chapters) if chapters and os.environ.get(WORKSPACE_ENV) else None
        hyp = getattr(getattr(item, "obj", None), "hypothesis", None)
        if targets and hyp is not None:  # Hypothesis replays the failing example last
            inner, found = hyp.inner_test, []

            def traced(*args, **kwargs):
                if not getattr(_hypothesis_context(), "is_final", False) or found:
                    return inner(*args, **kwargs)
                try:
                    return divergence.trace(targets, lambda: inner(*args, **kwargs), found)
                finally:
                    _DIVERGENCE[item.nodeid] = found[0]

            hyp.inner_test = traced
        start, ran, before = time.monotonic(), set(), sys.gettrace()
        if GRADE is not None:
            _trace_regions(ran)
        if os.environ.get(WORKSPACE_ENV) and hasattr(signal, "setitimer"):  # an endless loop
            signal.signal(signal.SIGALRM, _took_too_long)  # ends the test, not the check
            signal.setitimer(signal.ITIMER_REAL, TEST_SECONDS, 5)
        try:
            outcome = yield
        finally:
            if os.environ.get(WORKSPACE_ENV) and hasattr(signal, "setitimer"):
                signal.setitimer(signal.ITIMER_REAL, 0)
            if GRADE is not None:
                sys.settrace(before)
                REPORT["regions"][item.nodeid] = sorted(ran - {None})
        quick = time.monotonic() - start < 10  # a long test (a training run) is not run again
        if targets and hyp is not None:
            hyp.inner_test = inner
        elif (
            targets and quick and outcome.excinfo and outcome.excinfo[0] is not NotImplementedError
        ):
            found, record = [], tolerances.ON_COMPARISON  # the test again, its checks unrecorded
            tolerances.ON_COMPARISON = None
            try:
                divergence.trace(targets, item.runtest, found)
            except Exception:
                pass
            finally:
                tolerances.ON_COMPARISON = record
            _DIVERGENCE[item.nodeid] = found[0] if found else None

    _TARGETS: list = []

    def _targets(chapters: set) -> dict:
        from parity_tests import divergence

        if not _TARGETS:
            _TARGETS.append(divergence.Targets(NUMPY_IMPL))
        return _TARGETS[0].for_chapters(chapters)

    def pytest_collection_finish(session) -> None:
        REPORT["collected"] = [
            {
                "nodeid": item.nodeid,
                "chapters": sorted({m.name for m in item.iter_markers() if m.name in CHAPTERS}),
            }
            for item in session.items
        ]

    def pytest_collectreport(report) -> None:
        if report.failed:
            REPORT["collect_errors"].append(
                {"nodeid": report.nodeid, "message": str(report.longrepr)[-4000:]}
            )


if GRADE is not None:
    _REGION_LINES = {
        (str(NUMPY_IMPL / file), line): key
        for file, spans in GRADE["regions"].items()
        for key, first, last in spans
        for line in range(first, last + 1)
    }
    _REGION_FILES = {file for file, _ in _REGION_LINES}

    def _trace_regions(ran: set) -> None:
        """Trace which exercise regions the test runs: a region scores on its own tests."""

        def line(frame, event, arg):
            ran.add(_REGION_LINES.get((frame.f_code.co_filename, frame.f_lineno)))
            return line

        sys.settrace(lambda frame, *_: line if frame.f_code.co_filename in _REGION_FILES else None)


def pytest_sessionfinish(session, exitstatus) -> None:
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:  # an xdist worker: hand the summary to the controller
        from parity_tests.tolerances import export_reached

        workeroutput["reached"] = export_reached()
    if REPORT_PATH is not None or GRADE is not None:
        REPORT["exitstatus"] = int(exitstatus)
        REPORT["finished"] = time.time()
        _write_report()
