"""``python -m labs notebook NN``: a chapter's lab as a Jupyter notebook.

The notebook of chapter 03 is written and executed top to bottom in a fresh
kernel (nbclient, as ``--execute`` does): no cell fails and both figures show
inline. An existing notebook is never overwritten without ``--force``, and the
notebooks written beside the labs are git-ignored. Needs the ``notebook``
extra (jupytext, ipykernel, nbclient); skipped without it (the ``dev`` extra,
which CI installs, has it).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from labs.__main__ import main

ROOT = Path(__file__).resolve().parent.parent


def _cli(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["notebook", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def test_notebook_03_runs_top_to_bottom(tmp_path, monkeypatch, capsys):
    for module in ("jupytext", "nbclient", "ipykernel"):
        pytest.importorskip(module)
    import nbformat

    monkeypatch.setenv("TWINFORMER_FIGURES", str(tmp_path / "figures"))  # the kernel's too
    out = tmp_path / "ch03.ipynb"
    rc, said, err = _cli(capsys, "03", "--out", str(out), "--execute")
    assert rc == 0, err
    assert "wrote" in said and "VS Code" in said

    nb = nbformat.read(out, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == "python3"
    assert "jupytext" not in nb.metadata  # a plain notebook, not paired with lab.py
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert len(code) >= 5 and nb.cells[0].cell_type == "markdown"
    assert nb.cells[0].source.startswith("# Chapter 03 lab")
    assert all(c.execution_count for c in code)  # every cell ran, in order
    outputs = [o for c in code for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) == 2  # attention_weights and softmax_saturation, inline
    text = "".join(o.get("text", "") for o in outputs)
    assert "dq" in text and "central difference" in text  # the lab's printed checks
    drawn = {p.name for p in (tmp_path / "figures" / "03_attention").glob("*.png")}
    assert drawn == {"attention_weights.png", "softmax_saturation.png"}


def test_notebook_never_overwrites_without_force(tmp_path, capsys):
    pytest.importorskip("jupytext")
    out = tmp_path / "lab.ipynb"
    rc, said, err = _cli(capsys, "3", "--out", str(out))
    assert rc == 0, err
    # what it wrote, and how to open it
    assert said.startswith(f"wrote {out} (") and f"jupyter lab {out}" in said, said
    assert "VS Code" in said and said.count("\n") == 2, said
    out.write_text(out.read_text(encoding="utf-8").replace("Chapter 03 lab", "my notes"))
    mine = out.read_bytes()
    rc, said, err = _cli(capsys, "03", "--out", str(out))
    assert rc == 2 and said == "" and "--force" in err and err.count("\n") == 1
    assert out.read_bytes() == mine  # untouched
    rc, _, err = _cli(capsys, "03", "--out", str(out), "--force")
    assert rc == 0, err
    assert b"my notes" not in out.read_bytes()
    assert not list(tmp_path.glob(".*.tmp"))  # no temporary file left behind
    # a folder gets <chapter>.ipynb; bad chapters and paths are one line
    rc, _, err = _cli(capsys, "03", "--out", str(tmp_path))
    assert rc == 0 and (tmp_path / "03_attention.ipynb").is_file(), err
    for argv in (["99"], ["x"], ["03", "--out", str(tmp_path / "lab.txt")]):
        rc, _, err = _cli(capsys, *argv)
        assert rc == 2 and err.startswith("error: ") and err.count("\n") == 1, err


def test_notebooks_beside_the_labs_are_git_ignored():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    for path in ("labs/03_attention/lab.ipynb", "labs/16_encoder_decoder/lab.ipynb"):
        r = subprocess.run(
            ["git", "check-ignore", "-q", path], cwd=ROOT, capture_output=True, check=False
        )
        assert r.returncode == 0, f"{path} is not git-ignored"
