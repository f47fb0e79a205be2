"""Real models in and out from the command line: ``labs import``, ``sample``, ``export``,
``train --init-from`` (labs/plumbing/importing.py, exporting.py, hf_files.py, nanogpt.py).

Every model here is small and random, built by the test (nothing is downloaded):

* GPT-2: ``transformers``' ``GPT2LMHeadModel``, saved with ``save_pretrained``, with a
  tiny byte-level BPE trained by HF ``tokenizers`` and wrapped as ``GPT2TokenizerFast``;
  in two layouts: ``transformer.``-prefixed keys, tied head, ``tokenizer.json``; and the
  hub's ``gpt2`` layout (keys without the prefix, as ``GPT2Model`` names them), untied,
  with GPT-2's original ``vocab.json`` + ``merges.txt`` instead of ``tokenizer.json``.
* nanoGPT: its model (``NanoGPT`` below: nanoGPT's ``model.py`` reduced to the forward
  pass, module for module, so the state dict has its exact names), saved as its
  ``train.py`` saves ``ckpt.pt`` (under ``torch.compile``'s ``_orig_mod.`` prefix) with a
  ``meta.pkl`` as its ``prepare.py`` writes it; with and without biases.
* Llama: ``LlamaForCausalLM`` with a config this GPT can run, and the same BPE.

``labs import`` then ``labs sample --temperature 0`` prints what the source model's own
greedy decoding gives (HF's ``generate``; nanoGPT's loop), in both backends; ``labs
export`` gives a directory ``AutoModelForCausalLM`` and ``AutoTokenizer`` load, with the
source's logits (float32, INTEROP_FLOAT32). The rows of byte tokens >= 0x80 are zeroed in
the random models, so that greedy text is ASCII (a random model otherwise emits broken
UTF-8, whose replacement characters would hide which bytes were produced).
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from labs.__main__ import main as labs_main
from labs.plumbing.checkpoint import load_checkpoint
from parity_tests.harness import randomize_
from parity_tests.strategies import SeededRng
from parity_tests.tolerances import INTEROP_FLOAT32, assert_close

transformers = pytest.importorskip("transformers")
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: E402

TEXT = (
    "First Citizen:\nBefore we proceed any further, hear me speak.\n\n"
    "All:\nSpeak, speak.\n\nFirst Citizen:\nYou are all resolved rather to die "
    "than to famish?\n\nAll:\nResolved. resolved.\n"
) * 8
PROMPT = "All:\nSpeak"
NEW = 16


@pytest.fixture(autouse=True, scope="module")
def _offline():
    """Hugging Face's libraries may not reach the hub from here: every path is local."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        yield


def cli(capsys, *argv: str) -> tuple[int, str, str]:
    """``python -m labs ARGV`` in this process: (exit status, stdout, stderr)."""
    capsys.readouterr()  # what came before (transformers' progress bars) is not the command's
    status = labs_main([str(a) for a in argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "text.txt"
    path.write_text(TEXT, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def hf_tokenizer():
    """A byte-level BPE of 300 ids trained by HF tokenizers, wrapped for GPT-2."""
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator([TEXT], trainer)
    return transformers.GPT2TokenizerFast(
        tokenizer_object=tok, bos_token="<|endoftext|>", eos_token="<|endoftext|>"
    )


def ascii_only_rows(tokenizer) -> np.ndarray:
    """Ids whose bytes are not printable ASCII (and the special token): their embedding
    and head rows are zeroed, so greedy decoding never picks them."""
    from numpy_impl.byte_level import str_to_token

    bad = []
    for token, i in tokenizer.get_vocab().items():
        try:
            raw = str_to_token(token)
        except ValueError:  # <|endoftext|> is spelled with stand-ins of ASCII only; others
            bad.append(i)
            continue
        if any(b >= 0x80 or (b < 0x20 and b != 0x0A) for b in raw) or token == "<|endoftext|>":
            bad.append(i)
    return np.array(sorted(bad))


@torch.no_grad()
def zero_rows(model, rows: np.ndarray) -> None:
    emb = model.get_input_embeddings().weight
    emb[torch.from_numpy(rows)] = 0.0
    head = model.get_output_embeddings().weight
    head[torch.from_numpy(rows)] = 0.0


def hf_generate(model, tokenizer, prompt: str = PROMPT, n: int = NEW) -> str:
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            max_new_tokens=n,
            min_new_tokens=n,
            pad_token_id=0,
        )
    new = out[0, ids.shape[1] :].tolist()
    assert len(set(new)) > 3, f"a degenerate model would prove little: {new}"
    return prompt + tokenizer.decode(new)


def hf_logits(model, x: np.ndarray) -> np.ndarray:
    with torch.no_grad():
        return model(torch.from_numpy(x)).logits.numpy()


def without_prefix(path: Path) -> None:
    """Rewrite model.safetensors with the hub gpt2's names: no ``transformer.`` prefix."""
    from safetensors.numpy import load_file, save_file

    weights = load_file(str(path))
    renamed = {k.removeprefix("transformer."): v for k, v in weights.items()}
    save_file(renamed, str(path), metadata={"format": "pt"})


def as_vocab_and_merges(directory: Path) -> None:
    """Replace tokenizer.json by GPT-2's original files, vocab.json and merges.txt."""
    doc = json.loads((directory / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = doc["model"]["vocab"]
    merges = [m if isinstance(m, str) else " ".join(m) for m in doc["model"]["merges"]]
    (directory / "vocab.json").write_text(json.dumps(vocab), encoding="utf-8")
    (directory / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    (directory / "tokenizer.json").unlink()


GPT2_LAYOUTS = {  # name -> (tied, keys with "transformer.", tokenizer.json)
    "prefixed-tied-tokenizer.json": (True, True, True),
    "hub-untied-vocab+merges": (False, False, False),
}


@pytest.fixture(scope="module")
def gpt2_dirs(tmp_path_factory, hf_tokenizer) -> dict:
    """layout -> (HF model directory, the model)."""
    out = {}
    for i, (layout, (tied, prefixed, tokenizer_json)) in enumerate(GPT2_LAYOUTS.items()):
        config = transformers.GPT2Config(
            vocab_size=len(hf_tokenizer),
            n_positions=32,
            n_embd=24,
            n_layer=2,
            n_head=3,
            tie_word_embeddings=tied,
            bos_token_id=None,
            eos_token_id=None,
        )
        torch.manual_seed(i)
        model = transformers.GPT2LMHeadModel(config).eval()
        randomize_(model, SeededRng(10 + i))
        with torch.no_grad():  # positions dominate: the greedy path moves from token to token
            model.transformer.wpe.weight.mul_(4.0)
        zero_rows(model, ascii_only_rows(hf_tokenizer))
        directory = tmp_path_factory.mktemp("hf") / layout
        model.save_pretrained(directory)
        hf_tokenizer.save_pretrained(directory)
        if not prefixed:
            without_prefix(directory / "model.safetensors")
        if not tokenizer_json:
            as_vocab_and_merges(directory)
        out[layout] = (directory, model)
    return out


@pytest.fixture(scope="module")
def gpt2_runs(tmp_path_factory, gpt2_dirs) -> dict:
    """layout -> the checkpoint ``labs import gpt2`` wrote."""
    runs = {}
    base = tmp_path_factory.mktemp("runs")
    for layout, (directory, _) in gpt2_dirs.items():
        run = base / layout
        assert labs_main(["import", "gpt2", str(directory), "--out", str(run)]) == 0
        runs[layout] = run
    return runs


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("layout", GPT2_LAYOUTS)
def test_imported_gpt2_samples_what_hf_generate_gives(
    layout, backend, gpt2_dirs, gpt2_runs, hf_tokenizer, capsys
):
    _, model = gpt2_dirs[layout]
    expected = hf_generate(model, hf_tokenizer)
    status, out, err = cli(
        capsys,
        "sample",
        "--checkpoint",
        gpt2_runs[layout],
        "--backend",
        backend,
        "--prompt",
        PROMPT,
        "--max-new-tokens",
        NEW,
        "--temperature",
        0,
    )
    assert status == 0, err
    assert out == expected + "\n"


def test_the_import_is_an_ordinary_checkpoint(gpt2_runs, gpt2_dirs, hf_tokenizer, capsys):
    _, config, optimizer = load_checkpoint(gpt2_runs["hub-untied-vocab+merges"])
    assert optimizer is None and config["step"] == 0 and "train" not in config
    assert config["imported_from"]["kind"] == "gpt2"
    assert config["model"]["tie_weights"] is False and config["model"]["dropout"] == 0.1
    assert config["tokenizer"]["type"] == "bpe"
    assert config["tokenizer"]["vocab_size"] == len(hf_tokenizer)
    status, out, _ = cli(capsys, "inspect", gpt2_runs["prefixed-tied-tokenizer.json"], "--json")
    facts = json.loads(out)
    n_hf = sum(p.numel() for p in gpt2_dirs["prefixed-tied-tokenizer.json"][1].parameters())
    assert status == 0 and facts["tied_head"] and facts["parameters"]["total"] == n_hf
    assert facts["parameters"]["head"] == 0
    # the KV cache (sample's default) and the plain loop give the same greedy text
    run = gpt2_runs["prefixed-tied-tokenizer.json"]
    args = [
        "sample",
        "--checkpoint",
        run,
        "--prompt",
        PROMPT,
        "--max-new-tokens",
        40,
        "--temperature",
        0,
    ]
    assert cli(capsys, *args)[1] == cli(capsys, *args, "--no-kv-cache")[1]


@pytest.mark.parametrize("layout", GPT2_LAYOUTS)
def test_export_reloads_in_hf_with_the_original_logits(
    layout, gpt2_dirs, gpt2_runs, hf_tokenizer, tmp_path, capsys
):
    out = tmp_path / "exported"
    status, _, err = cli(capsys, "export", gpt2_runs[layout], "--to", "hf", "--out", out)
    assert status == 0, err
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == "gpt2" and config["architectures"] == ["GPT2LMHeadModel"]
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert isinstance(reloaded, transformers.GPT2LMHeadModel)
    _, original = gpt2_dirs[layout]
    x = SeededRng(3).ids(len(hf_tokenizer), (2, 32))
    assert_close(
        f"reloaded export vs the original GPT-2 ({layout})",
        hf_logits(reloaded, x),
        hf_logits(original, x),
        np.float32,
        tol=INTEROP_FLOAT32,
        scale_atol=True,
    )
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    assert tokenizer(TEXT)["input_ids"] == hf_tokenizer(TEXT)["input_ids"]
    assert tokenizer.decode(tokenizer(TEXT)["input_ids"]) == TEXT
    # never over an existing directory: refused in one line, the directory untouched
    before = sorted(p.name for p in out.iterdir())
    status, _, err = cli(capsys, "export", gpt2_runs[layout], "--to", "hf", "--out", out)
    assert status == 2 and err.startswith("error: --out") and "already exists" in err
    assert err.count("\n") == 1 and sorted(p.name for p in out.iterdir()) == before


def test_import_refuses_clearly_and_writes_nothing(gpt2_dirs, gpt2_runs, tmp_path, capsys):
    directory, _ = gpt2_dirs["prefixed-tied-tokenizer.json"]
    run = gpt2_runs["prefixed-tied-tokenizer.json"]
    stamp = (run / "config.json").stat().st_mtime_ns
    status, _, err = cli(capsys, "import", "gpt2", directory, "--out", run)
    assert status == 2 and "already exists" in err and err.count("\n") == 1
    assert (run / "config.json").stat().st_mtime_ns == stamp

    def broken(name: str, change) -> Path:
        copy = tmp_path / name
        copy.mkdir()
        for f in directory.iterdir():
            (copy / f.name).write_bytes(f.read_bytes())
        change(copy)
        return copy

    def edit_config(**fields):
        def change(d):
            config = json.loads((d / "config.json").read_text())
            (d / "config.json").write_text(json.dumps({**config, **fields}))

        return change

    def repeat_key(name: str):
        def change(d):
            text = (d / "config.json").read_text()
            config = json.loads(text)
            start = text.index("{") + 1
            text = f"{text[:start]}{json.dumps(name)}: {config[name] + 1}, {text[start:]}"
            (d / "config.json").write_text(text)

        return change

    def char_vocabulary(d):  # what `labs export` writes for a char model
        from labs.plumbing.hf_files import char_tokenizer_json

        (d / "tokenizer.json").write_text(char_tokenizer_json("abc"), encoding="utf-8")

    def as_int32(d):
        from safetensors.numpy import load_file, save_file

        weights = load_file(d / "model.safetensors")
        weights = {k: v.astype(np.int32) for k, v in weights.items()}
        save_file(weights, d / "model.safetensors", metadata={"format": "pt"})

    cases = [
        (broken("eps", edit_config(layer_norm_epsilon=1e-6)), "layer_norm_epsilon"),
        (broken("act", edit_config(activation_function="relu")), "activation_function"),
        (broken("type", edit_config(model_type="llama")), "model_type"),
        (broken("depth", edit_config(n_layer=3)), "declares 3 layers but the weights hold 2"),
        (broken("notok", lambda d: (d / "tokenizer.json").unlink()), "no tokenizer.json"),
        # once read as the last value, and cast to float32, silently
        (broken("twice", repeat_key("n_layer")), "the key 'n_layer' is given twice"),
        (broken("ints", as_int32), "stored as int32, not as floating point"),
        (broken("epsstr", edit_config(layer_norm_epsilon="1e-5")), "uses 1e-5, got '1e-5'"),
        (broken("scalestr", edit_config(scale_attn_weights="false")), "needs True, got 'false'"),
        (broken("chars", char_vocabulary), "a character vocabulary (one token per character"),
        (
            broken("pickle", lambda d: (d / "model.safetensors").rename(d / "pytorch_model.bin")),
            "pytorch_model.bin",
        ),
    ]
    cases.append((run, "twinformer checkpoint already"))  # ours is not HF's config.json
    for source, match in cases:
        out = tmp_path / f"run-{source.name}"
        status, _, err = cli(capsys, "import", "gpt2", source, "--out", out)
        assert status == 2 and match in err and err.count("\n") == 1, (source.name, err)
        assert not out.exists() and not list(tmp_path.glob(f".run-{source.name}*"))
    status, _, err = cli(
        capsys, "import", "gpt2", directory, "--out", tmp_path / "x", "--meta", "m.pkl"
    )
    assert status == 2 and "--meta" in err


def test_non_finite_weights_are_refused_naming_the_tensor(
    gpt2_dirs, gpt2_runs, corpus, tmp_path, capsys
):
    """A NaN weight was imported silently; ``sample`` then ended in a traceback and
    ``train --init-from`` blamed its own (empty) output directory. Now: ``import``
    refuses it, naming the tensor and writing nothing; a checkpoint that holds one
    (written before) is refused by ``sample`` and ``--init-from`` in one line."""
    from safetensors.numpy import load_file, save_file

    from labs.plumbing.checkpoint import load_checkpoint, save_checkpoint

    directory, _ = gpt2_dirs["prefixed-tied-tokenizer.json"]
    source = tmp_path / "nan-hf"
    shutil.copytree(directory, source)
    weights = load_file(source / "model.safetensors")
    weights["transformer.h.1.mlp.c_fc.weight"][0, 0] = np.nan
    save_file(weights, source / "model.safetensors", metadata={"format": "pt"})
    status, _, err = cli(capsys, "import", "gpt2", source, "--out", tmp_path / "imported")
    assert status == 2 and err.count("\n") == 1, err
    assert "blocks.1.ffn.fc1.weight: the weights hold 1 NaN or infinite value(s)" in err, err
    assert not (tmp_path / "imported").exists()

    run = gpt2_runs["prefixed-tied-tokenizer.json"]
    state, config, _ = load_checkpoint(run)
    state["blocks.0.ln1.weight"] = np.full_like(state["blocks.0.ln1.weight"], np.inf)
    poisoned = tmp_path / "poisoned"
    extra = {"tokenizer.json": (run / "tokenizer.json").read_bytes()}
    meta = {"step": 0, "imported_from": config["imported_from"]}
    save_checkpoint(poisoned, state, {k: config[k] for k in ("model", "tokenizer")}, meta=meta,
                    extra_files=extra)  # fmt: skip
    for argv, says in [
        (["sample", "--checkpoint", poisoned, "--max-new-tokens", 2], f"{poisoned}: "),
        (
            [
                "train",
                "--init-from",
                poisoned,
                "--data",
                corpus,
                "--out",
                tmp_path / "ft",
                "--max-iters",
                1,
            ],
            f"--init-from {poisoned}: ",
        ),  # fmt: skip
    ]:
        status, _, err = cli(capsys, *argv)
        assert status == 2 and err.count("\n") == 1 and "Traceback" not in err, err
        assert err.startswith(f"error: {says}blocks.0.ln1.weight holds 24 NaN or infinite"), err
    assert not (tmp_path / "ft").exists()


def test_a_smaller_tokenizer_is_padded_to_the_models_rows(gpt2_dirs, tmp_path, capsys):
    """A model with more token rows than its tokenizer has ids (nanoGPT's 50304 for
    GPT-2's 50257): the extra ids become <|reserved_N|> special tokens."""
    directory, _ = gpt2_dirs["prefixed-tied-tokenizer.json"]
    copy = tmp_path / "padded"
    copy.mkdir()
    for f in directory.iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    config = json.loads((copy / "config.json").read_text())
    n = config["vocab_size"]
    from safetensors.numpy import load_file, save_file

    weights = load_file(str(copy / "model.safetensors"))
    wte = weights["transformer.wte.weight"]
    weights["transformer.wte.weight"] = np.concatenate(
        [wte, np.zeros((5, wte.shape[1]), wte.dtype)]
    )
    save_file(weights, str(copy / "model.safetensors"), metadata={"format": "pt"})
    (copy / "config.json").write_text(json.dumps({**config, "vocab_size": n + 5}))
    status, out, err = cli(capsys, "import", "gpt2", copy, "--out", tmp_path / "run")
    assert status == 0, err
    assert "<|reserved_N|>" in out
    _, saved, _ = load_checkpoint(tmp_path / "run")
    assert saved["model"]["vocab_size"] == saved["tokenizer"]["vocab_size"] == n + 5


# -- fine-tuning an import -----------------------------------------------------------------
SMALL_TRAIN = [
    "--eval-batches",
    "2",
    "--eval-batch-size",
    "4",
    "--batch-size",
    "4",
    "--block-size",
    "16",
    "--sample-tokens",
    "5",
]


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_init_from_an_import_fine_tunes_it(backend, gpt2_runs, corpus, tmp_path, capsys):
    run = gpt2_runs["prefixed-tied-tokenizer.json"]
    new = tmp_path / "tuned"
    lr, wd = 1e-3, 0.1
    status, out, err = cli(
        capsys,
        "train",
        "--init-from",
        run,
        "--data",
        corpus,
        "--out",
        new,
        "--backend",
        backend,
        "--max-iters",
        1,
        "--eval-interval",
        1,
        "--warmup-iters",
        0,
        "--lr",
        lr,
        "--weight-decay",
        wd,
        "--grad-accum",
        2,
        "--dropout",
        0.0,
        *SMALL_TRAIN,
    )
    assert status == 0, err
    assert f"initialised from {run}" in out
    before, imported, _ = load_checkpoint(run)
    after, config, optimizer = load_checkpoint(new)
    assert config["model"] == {**imported["model"], "dropout": 0.0}
    assert config["tokenizer"] == imported["tokenizer"] and config["step"] == 1
    assert config["train"]["init_from"] == str(run) and optimizer is not None
    # one AdamW step from the imported weights: each moves by at most lr (1 + wd |w|)
    for k in before:
        bound = lr * (1 + wd * np.abs(before[k])) * 1.001 + 1e-7
        assert np.all(np.abs(after[k] - before[k]) <= bound), k
    # the fine-tuned run resumes like any other; the import itself has no run to resume
    status, _, err = cli(capsys, "train", "--resume", new, "--max-iters", 2)
    assert status == 0, err
    assert load_checkpoint(new)[1]["step"] == 2
    status, _, err = cli(capsys, "train", "--resume", run, "--max-iters", 2)
    assert status == 2 and "--init-from" in err


def test_init_from_refuses_what_would_change_the_model(gpt2_runs, corpus, tmp_path, capsys):
    run = gpt2_runs["prefixed-tied-tokenizer.json"]
    base = ["train", "--init-from", run, "--data", corpus, "--max-iters", 1]
    for extra, match in (
        (["--n-layers", 3, "--out", tmp_path / "a"], "--n-layers"),
        (["--tokenizer", "char", "--out", tmp_path / "b"], "--tokenizer"),
        (["--block-size", 64, "--out", tmp_path / "c"], "--block-size 64"),
        (["--out", run, "--block-size", 16], "is the --init-from checkpoint"),
        (["--backend", "numpy", "--amp", "bf16", "--out", tmp_path / "d"], "--amp"),
        (["--grad-accum", 0, "--out", tmp_path / "e"], "--grad-accum"),
    ):
        status, _, err = cli(capsys, *base, *extra)
        assert status == 2 and match in err and err.count("\n") == 1, (extra, err)


# -- nanoGPT -------------------------------------------------------------------------------
class NanoLayerNorm(nn.Module):
    """nanoGPT's LayerNorm: an optional bias (PyTorch's had none to switch off)."""

    def __init__(self, ndim: int, bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class NanoAttention(nn.Module):
    def __init__(self, C: int, n_head: int, bias: bool):
        super().__init__()
        self.c_attn = nn.Linear(C, 3 * C, bias=bias)
        self.c_proj = nn.Linear(C, C, bias=bias)
        self.n_head = n_head

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class NanoMLP(nn.Module):
    def __init__(self, C: int, bias: bool):
        super().__init__()
        self.c_fc = nn.Linear(C, 4 * C, bias=bias)
        self.gelu = nn.GELU()  # the exact (erf) GELU
        self.c_proj = nn.Linear(4 * C, C, bias=bias)

    def forward(self, x):
        return self.c_proj(self.gelu(self.c_fc(x)))


class NanoBlock(nn.Module):
    def __init__(self, C: int, n_head: int, bias: bool):
        super().__init__()
        self.ln_1 = NanoLayerNorm(C, bias)
        self.attn = NanoAttention(C, n_head, bias)
        self.ln_2 = NanoLayerNorm(C, bias)
        self.mlp = NanoMLP(C, bias)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class NanoGPT(nn.Module):
    """nanoGPT's GPT (Karpathy, model.py, MIT licence), the forward pass only: the same
    modules under the same names, so its state dict is a real ckpt.pt's."""

    def __init__(self, n_layer, n_head, n_embd, block_size, bias, vocab_size, dropout=0.0):
        super().__init__()
        self.block_size = block_size
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(vocab_size, n_embd),
                wpe=nn.Embedding(block_size, n_embd),
                drop=nn.Dropout(dropout),
                h=nn.ModuleList(NanoBlock(n_embd, n_head, bias) for _ in range(n_layer)),
                ln_f=NanoLayerNorm(n_embd, bias),
            )
        )
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # weight tying

    def forward(self, idx):
        t = self.transformer
        pos = torch.arange(idx.shape[1])
        x = t.drop(t.wte(idx) + t.wpe(pos))
        for block in t.h:
            x = block(x)
        return self.lm_head(t.ln_f(x))

    @torch.no_grad()
    def greedy(self, idx, n: int):
        for _ in range(n):
            logits = self(idx[:, -self.block_size :])[:, -1, :]
            idx = torch.cat((idx, logits.argmax(-1, keepdim=True)), dim=1)
        return idx


class RunsCode:
    """A pickle that would create a file if it were unpickled with pickle.load."""

    def __init__(self, path: Path):
        self.path = path

    def __reduce__(self):
        return (os.system, (f"touch {self.path}",))


def write_nanogpt(directory: Path, bias: bool, shuffled_vocab: bool, seed: int):
    """A ckpt.pt and meta.pkl as nanoGPT's train.py and prepare.py write them."""
    chars = sorted(set(TEXT))
    itos = dict(enumerate(chars))
    if shuffled_vocab:  # a meta.pkl whose ids are not the sorted characters
        order = np.random.default_rng(seed).permutation(len(chars))
        itos = {i: chars[j] for i, j in enumerate(order)}
    stoi = {c: i for i, c in itos.items()}
    model_args = dict(
        n_layer=2, n_head=2, n_embd=16, block_size=24, bias=bias, vocab_size=len(chars), dropout=0.0
    )
    torch.manual_seed(seed)
    model = NanoGPT(**model_args).eval()
    randomize_(model, SeededRng(seed))
    with torch.no_grad():  # positions dominate: the greedy path moves from token to token
        model.transformer.wpe.weight.mul_(4.0)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    checkpoint = {
        "model": {f"_orig_mod.{k}": v for k, v in model.state_dict().items()},  # compiled
        "optimizer": optimizer.state_dict(),
        "model_args": model_args,
        "iter_num": 250,
        "best_val_loss": torch.tensor(1.5),
        "config": {"dataset": "shakespeare_char", "batch_size": 12, "compile": True},
    }
    directory.mkdir(parents=True)
    torch.save(checkpoint, directory / "ckpt.pt")
    with open(directory / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": len(chars), "itos": itos, "stoi": stoi}, f)
    return model, itos, stoi


NANO_CASES = {"bias": (True, False), "no-bias-shuffled-vocab": (False, True)}


@pytest.fixture(scope="module")
def nano(tmp_path_factory) -> dict:
    """case -> (directory, the model, itos, stoi, the imported run)."""
    out = {}
    for i, (case, (bias, shuffled)) in enumerate(NANO_CASES.items()):
        directory = tmp_path_factory.mktemp("nano") / case
        model, itos, stoi = write_nanogpt(directory, bias, shuffled, seed=20 + i)
        run = directory.parent / f"{case}-run"
        argv = [
            "import",
            "nanogpt",
            directory / "ckpt.pt",
            "--meta",
            directory / "meta.pkl",
            "--out",
            run,
        ]
        assert labs_main([str(a) for a in argv]) == 0
        out[case] = (directory, model, itos, stoi, run)
    return out


@pytest.mark.parametrize("backend", ["numpy", "torch"])
@pytest.mark.parametrize("case", NANO_CASES)
def test_imported_nanogpt_samples_what_nanogpt_gives(case, backend, nano, capsys):
    _, model, itos, stoi, run = nano[case]
    prompt = "First Citizen:\n"
    idx = torch.tensor([[stoi[c] for c in prompt]])
    ids = model.greedy(idx, 30)[0, len(prompt) :].tolist()
    assert len(set(ids)) > 3, "a degenerate model would prove little"
    expected = prompt + "".join(itos[i] for i in ids)
    status, out, err = cli(
        capsys,
        "sample",
        "--checkpoint",
        run,
        "--backend",
        backend,
        "--prompt",
        prompt,
        "--max-new-tokens",
        30,
        "--temperature",
        0,
    )
    assert status == 0, err
    assert out == expected + "\n"


@pytest.mark.parametrize("case", NANO_CASES)
def test_nanogpt_exports_to_a_gpt2_hf_loads_with_nanogpts_logits(case, nano, tmp_path, capsys):
    directory, model, itos, stoi, run = nano[case]
    _, config, _ = load_checkpoint(run)
    assert config["imported_from"]["iter_num"] == 250
    assert config["model"]["gelu_approximate"] == "none" and config["model"]["bias"] == (
        case == "bias"
    )
    out = tmp_path / "hf"
    status, printed, err = cli(capsys, "export", run, "--to", "hf", "--out", out)
    assert status == 0, err
    assert ("zero biases" in printed) == (case != "bias")
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
    assert reloaded.config.activation_function == "gelu"
    tokenizer = transformers.AutoTokenizer.from_pretrained(out)
    prompt = "Before we proceed any"  # within block_size 24
    ours = tokenizer(prompt)["input_ids"]  # our ids: the sorted characters
    assert tokenizer.decode(ours) == prompt
    assert ours == [sorted(stoi).index(c) for c in prompt]
    with torch.no_grad():
        theirs = model(torch.tensor([[stoi[c] for c in prompt]]))[0].numpy()
        got = reloaded(torch.tensor([ours])).logits[0].numpy()
    perm = [stoi[c] for c in sorted(stoi)]  # our id j is nanoGPT's id perm[j]
    assert_close(
        f"HF GPT-2 of nanoGPT ({case}) vs nanoGPT",
        got,
        theirs[:, perm],
        np.float32,
        tol=INTEROP_FLOAT32,
        scale_atol=True,
    )


def test_nanogpt_pickles_are_never_run(tmp_path, capsys):
    """meta.pkl goes through a restricted unpickler, ckpt.pt through
    torch.load(weights_only=True): a pickle that names a function is refused, not run."""
    directory = tmp_path / "nano"
    write_nanogpt(directory, True, False, seed=3)
    witness = tmp_path / "ran"
    with open(tmp_path / "evil.pkl", "wb") as f:
        pickle.dump({"itos": {0: "a"}, "evil": RunsCode(witness)}, f)
    status, _, err = cli(
        capsys,
        "import",
        "nanogpt",
        directory / "ckpt.pt",
        "--meta",
        tmp_path / "evil.pkl",
        "--out",
        tmp_path / "r1",
    )
    assert status == 2 and "only plain dicts" in err and not witness.exists()
    ckpt = torch.load(directory / "ckpt.pt", weights_only=True)
    torch.save({**ckpt, "evil": RunsCode(witness)}, tmp_path / "evil.pt")
    status, _, err = cli(
        capsys,
        "import",
        "nanogpt",
        tmp_path / "evil.pt",
        "--meta",
        directory / "meta.pkl",
        "--out",
        tmp_path / "r2",
    )
    assert status == 2 and "weights_only=True" in err and not witness.exists()
    for extra, match in (
        ([], "--meta meta.pkl"),  # no tokenizer at all
        (["--meta", directory / "meta.pkl", "--rope-layout", "interleaved"], "--rope-layout"),
    ):
        status, _, err = cli(
            capsys, "import", "nanogpt", directory / "ckpt.pt", "--out", tmp_path / "r3", *extra
        )
        assert status == 2 and match in err, err
    torch.save({**ckpt, "model_args": {**ckpt["model_args"], "n_kv_head": 1}}, tmp_path / "fork.pt")
    status, _, err = cli(
        capsys,
        "import",
        "nanogpt",
        tmp_path / "fork.pt",
        "--meta",
        directory / "meta.pkl",
        "--out",
        tmp_path / "r4",
    )
    assert status == 2 and "n_kv_head" in err
    assert not any(tmp_path.glob("r[0-9]*"))


def test_nanogpt_on_gpt2_tokens_pads_its_rounded_vocabulary(hf_tokenizer, tmp_path, capsys):
    """nanoGPT's GPT-2-token runs round the vocabulary up (50257 -> 50304): imported with
    GPT-2's tokenizer files (--tokenizer DIR), the extra rows become reserved ids, and the
    backends generate nanoGPT's greedy ids."""
    from labs.plumbing.backends import make_backend

    tok_dir = tmp_path / "tok"
    hf_tokenizer.save_pretrained(tok_dir)
    V = len(hf_tokenizer) + 12
    model_args = dict(
        n_layer=1, n_head=2, n_embd=16, block_size=16, bias=True, vocab_size=V, dropout=0.1
    )
    torch.manual_seed(0)
    model = NanoGPT(**{**model_args, "dropout": 0.0}).eval()
    randomize_(model, SeededRng(30))
    torch.save({"model": model.state_dict(), "model_args": model_args}, tmp_path / "ckpt.pt")
    status, out, err = cli(
        capsys,
        "import",
        "nanogpt",
        tmp_path / "ckpt.pt",
        "--tokenizer",
        tok_dir,
        "--out",
        tmp_path / "run",
    )
    assert status == 0, err
    assert "<|reserved_N|>" in out and "_orig_mod" not in out
    state, config, _ = load_checkpoint(tmp_path / "run")
    assert config["tokenizer"]["vocab_size"] == V and config["model"]["dropout"] == 0.1
    prompt = [5, 17, 42]
    expected = model.greedy(torch.tensor([prompt]), 12)[0, 3:].tolist()
    for backend in ("numpy", "torch"):
        b = make_backend(backend, config["model"])
        b.load_state_dict(state)
        assert b.generate(prompt, 12, temperature=0.0) == expected, backend


# -- Llama ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def llama_dir(tmp_path_factory, hf_tokenizer):
    config = transformers.LlamaConfig(
        vocab_size=len(hf_tokenizer),
        hidden_size=24,
        intermediate_size=40,
        num_hidden_layers=2,
        num_attention_heads=3,
        num_key_value_heads=3,
        max_position_embeddings=32,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=None,
        pad_token_id=None,
    )
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    randomize_(model, SeededRng(40))
    zero_rows(model, ascii_only_rows(hf_tokenizer))
    directory = tmp_path_factory.mktemp("llama") / "llama"
    model.save_pretrained(directory)
    hf_tokenizer.save_pretrained(directory)
    return directory, model


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_imported_llama_samples_what_hf_generate_gives_and_exports(
    layout, llama_dir, hf_tokenizer, tmp_path, capsys
):
    directory, model = llama_dir
    run = tmp_path / "run"
    status, _, err = cli(
        capsys, "import", "llama", directory, "--out", run, "--rope-layout", layout
    )
    assert status == 0, err
    expected = hf_generate(model, hf_tokenizer)
    for backend in ("numpy", "torch"):
        status, out, err = cli(
            capsys,
            "sample",
            "--checkpoint",
            run,
            "--backend",
            backend,
            "--prompt",
            PROMPT,
            "--max-new-tokens",
            NEW,
            "--temperature",
            0,
        )
        assert status == 0, err
        assert out == expected + "\n", backend
    status, _, err = cli(capsys, "export", run, "--to", "hf", "--out", tmp_path / "hf")
    assert status == 0, err
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "hf").eval()
    assert isinstance(reloaded, transformers.LlamaForCausalLM)
    x = SeededRng(5).ids(len(hf_tokenizer), (2, 32))
    assert_close(
        f"reloaded Llama export ({layout}) vs the original",
        hf_logits(reloaded, x),
        hf_logits(model, x),
        np.float32,
        tol=INTEROP_FLOAT32,
        scale_atol=True,
    )


def test_a_llama_that_does_not_fit_is_refused_naming_the_field(llama_dir, tmp_path, capsys):
    directory, _ = llama_dir
    for field, value, says in (
        ("mlp_bias", True, "mlp_bias"),
        ("hidden_act", "gelu", "hidden_act"),
        ("rope_scaling", {"rope_type": "yarn", "factor": 2.0}, "rope_scaling: expected None or"),
        ("rope_theta", 500000.0, "rope_theta: the config gives two RoPE bases"),
    ):
        copy = tmp_path / field
        copy.mkdir()
        for f in directory.iterdir():
            (copy / f.name).write_bytes(f.read_bytes())
        config = json.loads((copy / "config.json").read_text())
        (copy / "config.json").write_text(json.dumps({**config, field: value}))
        status, _, err = cli(capsys, "import", "llama", copy, "--out", tmp_path / f"run-{field}")
        assert status == 2 and says in err and not (tmp_path / f"run-{field}").exists(), err
        assert err.count("\n") == 1, err


def test_export_refuses_what_hf_cannot_express(corpus, tmp_path, capsys):
    """A post-norm GPT has GPT-2's weights but computes something else: refused, named."""
    from labs.plumbing.checkpoint import save_checkpoint
    from labs.plumbing.checkpoint_format import expected_shapes

    for name, change in (
        ("norm_position", {"norm_position": "post"}),
        ("ffn", {"ffn": "relu"}),
        ("norm", {"pos_emb": "rope", "norm": "layernorm"}),
    ):
        model = {
            "vocab_size": 5,
            "block_size": 4,
            "n_layers": 1,
            "n_heads": 1,
            "d_model": 4,
            **change,
        }
        state = {k: np.zeros(s, np.float32) for k, s in expected_shapes(model).items()}
        run = tmp_path / f"run-{name}"
        save_checkpoint(
            run, state, {"model": model, "tokenizer": {"type": "char", "chars": "abcde"}}
        )
        status, _, err = cli(capsys, "export", run, "--to", "hf", "--out", tmp_path / f"hf-{name}")
        assert status == 2 and f"{name}:" in err and not (tmp_path / f"hf-{name}").exists(), err


# -- bench-gpt2: its model and its checks (the measurement itself is not a timed test) -----
def test_bench_gpt2_model_and_bad_options(capsys):
    from labs.commands.bench_more import MODELS
    from labs.plumbing.checkpoint_format import expected_shapes

    shapes = expected_shapes(MODELS["gpt2"])
    del shapes["head.weight"]  # tied
    assert sum(int(np.prod(s)) for s in shapes.values()) == 124_439_808  # GPT-2 small
    status, _, err = cli(capsys, "bench-gpt2", "--forward-tokens", "2000")
    assert status == 2 and "<= 1024" in err


def test_a_tokenizer_far_smaller_than_the_model_is_refused(hf_tokenizer):
    from labs.plumbing.hf_files import MAX_RESERVED, fit_vocabulary
    from numpy_impl.tokenizer import BPETokenizer

    tok = BPETokenizer.train(TEXT, 300)
    padded, n = fit_vocabulary(tok, 300 + MAX_RESERVED)
    assert n == MAX_RESERVED and padded.vocab_size == 300 + MAX_RESERVED
    assert padded.decode([300]) == "<|reserved_300|>" and padded.encode(TEXT) == tok.encode(TEXT)
    for size, match in ((301 + MAX_RESERVED, "not the tokenizer|is this"), (299, "no embedding")):
        with pytest.raises(ValueError, match=f"^vocab_size: .*({match})"):
            fit_vocabulary(tok, size)


def test_sharded_and_half_precision_weights_are_read(tmp_path):
    """model.safetensors.index.json and its shards (how the hub stores large models), and
    float16 / bfloat16 tensors, widened to float32 (NumPy has no bfloat16: torch reads it)."""
    from safetensors.torch import save_file

    from labs.plumbing.hf_files import read_hf_weights

    a = torch.randn(3, 4)
    save_file({"a": a.to(torch.bfloat16)}, tmp_path / "model-00001-of-00002.safetensors")
    save_file({"b": a.half(), "c": torch.arange(3)}, tmp_path / "model-00002-of-00002.safetensors")
    index = {"weight_map": {"a": "model-00001-of-00002.safetensors",
                            "b": "model-00002-of-00002.safetensors",
                            "c": "model-00002-of-00002.safetensors"}}  # fmt: skip
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    weights = read_hf_weights(tmp_path)
    assert {k: v.dtype for k, v in weights.items()} == {
        "a": np.float32,
        "b": np.float32,
        "c": np.int64,
    }
    np.testing.assert_array_equal(weights["a"], a.to(torch.bfloat16).float().numpy())
    np.testing.assert_array_equal(weights["b"], a.half().float().numpy())
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"a": "../x"}})
    )
    with pytest.raises(ValueError, match="not a file name"):
        read_hf_weights(tmp_path)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_a_tied_config_with_a_different_head_imports_untied(
    kind, gpt2_dirs, llama_dir, tmp_path, capsys
):
    """config.json ties the head, the weights hold another lm_head.weight: transformers
    loads it untied, and so does the import (once the head was dropped, silently)."""
    from safetensors.numpy import load_file, save_file

    directory = gpt2_dirs["prefixed-tied-tokenizer.json"][0] if kind == "gpt2" else llama_dir[0]
    emb = "transformer.wte.weight" if kind == "gpt2" else "model.embed_tokens.weight"
    for case in ("different", "equal"):
        source = tmp_path / case
        shutil.copytree(directory, source)
        config = json.loads((source / "config.json").read_text())
        (source / "config.json").write_text(json.dumps({**config, "tie_word_embeddings": True}))
        weights = load_file(source / "model.safetensors")
        head = weights[emb] * (0.5 if case == "different" else 1.0)
        save_file({**weights, "lm_head.weight": head}, source / "model.safetensors",
                  metadata={"format": "pt"})  # fmt: skip
        status, out, err = cli(capsys, "import", kind, source, "--out", tmp_path / f"run-{case}")
        assert status == 0, err
        state, saved, _ = load_checkpoint(tmp_path / f"run-{case}")
        assert saved["model"]["tie_weights"] == (case == "equal")
        assert ("imported untied, as transformers loads it" in out) == (case == "different")
        np.testing.assert_array_equal(state["head.weight"], head)
        hf = transformers.AutoModelForCausalLM.from_pretrained(source)
        np.testing.assert_array_equal(hf.get_output_embeddings().weight.detach().numpy(), head)
    from numpy_impl import pretrained

    with pytest.raises(ValueError, match="^lm_head.weight: the config ties it"):
        pretrained.check_tied_head(weights | {"lm_head.weight": head * 2}, emb, "lm_head.weight")


@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_a_killed_import_leaves_nothing_the_next_import_keeps(sig, gpt2_dirs, tmp_path, capsys):
    """A killed ``labs import`` leaves its hidden ``.RUN.PID.partial`` directory; the next
    import into the same place removes it (its process is gone), never a live one's."""
    import signal
    import subprocess
    import sys

    from labs.plumbing.checkpoint_files import PAUSE_ENV_VAR

    directory, _ = gpt2_dirs["prefixed-tied-tokenizer.json"]
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": str(root), PAUSE_ENV_VAR: "staged"}
    argv = [sys.executable, "-m", "labs", "import", "gpt2", str(directory), "--out"]
    child = subprocess.Popen([*argv, str(tmp_path / "run")], env=env, cwd=root,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert child.stderr.readline().strip() == "checkpoint writer paused at staged"
    finally:
        child.send_signal(getattr(signal, sig))
        child.wait(timeout=60)
        child.stderr.close()
    left = tmp_path / f".run.{child.pid}.partial"
    live = tmp_path / f".run.{os.getppid()}.partial"  # a running process's: kept
    assert left.is_dir() and not (tmp_path / "run").exists()
    live.mkdir()
    status, _, err = cli(capsys, "import", "gpt2", directory, "--out", tmp_path / "run")
    assert status == 0, err
    assert not left.exists() and live.exists() and (tmp_path / "run" / "config.json").is_file()


@pytest.mark.parametrize("family", ["qwen2.5-0.5b", "llama-3.2-1b"])
def test_a_gqa_family_imports_samples_and_exports_from_the_command_line(
    family, hf_tokenizer, tmp_path, capsys
):
    """``labs import llama`` of a Qwen2 (q/k/v biases) or Llama 3.2 (llama3 RoPE scaling,
    tied) directory with grouped-query heads: ``sample`` gives HF's greedy text in both
    backends, and ``export`` gives a directory transformers loads with the same logits."""
    from parity_tests.test_modern_models import FAMILIES, SMALL

    cls, fields = FAMILIES[family]
    config = getattr(transformers, cls)(**{**SMALL, **fields, "vocab_size": len(hf_tokenizer)})
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    randomize_(model, SeededRng(44))  # not degenerate: > 3 tokens
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.mul_(0.1 if name.endswith("proj.bias") else 1.0)  # as test_modern_models
            p.mul_(8.0 if name.endswith(("o_proj.weight", "down_proj.weight")) else 1.0)
    zero_rows(model, ascii_only_rows(hf_tokenizer))
    model.save_pretrained(tmp_path / "hf")
    hf_tokenizer.save_pretrained(tmp_path / "hf")
    status, _, err = cli(capsys, "import", "llama", tmp_path / "hf", "--out", tmp_path / "run")
    assert status == 0, err
    expected = hf_generate(model, hf_tokenizer)
    for backend in ("numpy", "torch"):
        status, out, err = cli(capsys, "sample", "--checkpoint", tmp_path / "run", "--backend",
                               backend, "--prompt", PROMPT, "--max-new-tokens", NEW,
                               "--temperature", 0)  # fmt: skip
        assert status == 0 and out == expected + "\n", (backend, err)
    status, _, err = cli(capsys, "export", tmp_path / "run", "--to", "hf", "--out", tmp_path / "x")
    assert status == 0, err
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "x").eval()
    assert type(reloaded) is type(model)
    x = SeededRng(5).ids(len(hf_tokenizer), (2, 32))
    assert_close(f"{family}: reloaded export vs the original", hf_logits(reloaded, x),
                 hf_logits(model, x), np.float32, tol=INTEROP_FLOAT32, scale_atol=True)  # fmt: skip
