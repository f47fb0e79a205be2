"""Measure ``labs check`` on mistakes no hint was written for (parity_tests/held_out.py).

Each mistake goes into a fresh workspace (the reference with that one edit); then
``python -m labs check NN`` runs on it, and the result is one of

* NAMED: the check fails and its output names the mistake's line (FILE:LINE, a line of
  the statement that holds it) or, for a catalogued mistake (``--twelve``), its hint;
* CAUGHT: the check fails without naming it;
* SILENT: the check passes;
* HANG: the check does not end in 600 s.

    python scripts/held_out_mistakes.py [--quick] [--twelve] [--out FILE] [NAME ...]

``--quick`` runs each mistake's ``-k`` selection instead of the whole chapter; ``--twelve``
measures the catalogue's mistakes of an issue's learner pass (mistakes.TWELVE) instead.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from labs.learner.exercises_fences import Reference  # noqa: E402
from labs.learner.exercises_workspace import Workspace  # noqa: E402
from parity_tests.held_out import HELD_OUT, mistake_lines  # noqa: E402
from parity_tests.mistakes import MISTAKES, TWELVE, write_mistake  # noqa: E402


def measure(ref: Reference, m, base: Path, quick: bool, reuse: Path | None):
    ws = Workspace(base / f"ch{m.chapter}-{m.name}")
    write_mistake(ref, ws, m)
    lines = mistake_lines(ref, m, (ws.package / m.file).read_text(encoding="utf-8"))
    where = f"numpy_impl/{m.file}:{lines[0]}"
    saved = reuse / f"ch{m.chapter}-{m.name}.out" if reuse else None
    if saved and saved.is_file():  # an earlier run's output (its workspace path differs)
        out = saved.read_text(encoding="utf-8")
    else:
        cmd = [sys.executable, "-m", "labs", "check", m.chapter, "--workspace", str(ws.root)]
        if quick and m.keyword:
            cmd += ["-k", m.keyword]
        try:
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
            out = proc.stdout + proc.stderr + f"\nexit status {proc.returncode}\n"
        except subprocess.TimeoutExpired:
            out = "TIMEOUT: the check did not end in 600 s\n"
    if out.startswith("TIMEOUT"):
        result = "HANG"
    elif "exit status 0\n" in out:
        result = "SILENT"
    elif (m in MISTAKES and m.expect in out) or any(
        re.search(rf"numpy_impl/{re.escape(m.file)}:{n}\b", out) for n in lines
    ):
        result = "NAMED"
    else:
        result = "CAUGHT"
    (base / f"ch{m.chapter}-{m.name}.out").write_text(out, encoding="utf-8")
    return result, where, out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("names", nargs="*", help="only these mistakes")
    p.add_argument("--quick", action="store_true", help="each mistake's -k selection only")
    p.add_argument("--out", type=Path, help="also write the table here")
    p.add_argument("--twelve", action="store_true", help="the issue's twelve catalogued mistakes")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--reuse", type=Path, help="the outputs of an earlier run, where there")
    args = p.parse_args()
    ref = Reference()
    source = [m for m in MISTAKES if m.name in TWELVE] if args.twelve else HELD_OUT
    chosen = [m for m in source if not args.names or m.name in args.names]
    base = Path(tempfile.mkdtemp(prefix="held-out-"))
    with ThreadPoolExecutor(args.jobs) as pool:
        results = list(pool.map(lambda m: measure(ref, m, base, args.quick, args.reuse), chosen))
    what = "the twelve" if args.twelve else "held-out"
    lines = [f"{what} mistakes, labs check{' -k' if args.quick else ''} ({base})"]
    for m, (result, where, _) in zip(chosen, results, strict=True):
        lines.append(f"{result:<7} ch{m.chapter} {m.name:<36} {where}  expect `{m.expect}`")
    counts = {r: sum(res[0] == r for res in results) for r in ("NAMED", "CAUGHT", "SILENT", "HANG")}
    n = len(results)
    lines.append(
        f"{counts['NAMED']} of {n} named ({100 * counts['NAMED'] / max(n, 1):.0f}%), "
        f"{counts['CAUGHT']} caught without a name, {counts['SILENT']} silent, "
        f"{counts['HANG']} hang; "
        f"{len({m.chapter for m in chosen})} chapters"
    )
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
