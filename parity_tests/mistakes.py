"""The catalogue of common mistakes, chapter by chapter: each one written into a learner's
workspace, and the hint ``python -m labs check`` must print for it.

A chapter README's "Pitfalls" section lists the mistakes learners make; here each is
an edit of the reference solution (the wrong code a learner would write) and the
words the check's output must contain. test_mistakes.py writes each into a fresh
workspace (every other region of the chapter solved), runs the chapter's check and
asserts the output names the mistake. The hints themselves come from running the
reference's buggy variants (hints.py) or from the symptom (tolerances.diagnose).

    from parity_tests.mistakes import MISTAKES, write_mistake
"""

from __future__ import annotations

from dataclasses import dataclass

from labs.learner.exercises_fences import Reference, parse_regions, replace_bodies
from labs.learner.exercises_workspace import Workspace, add_stubs
from parity_tests import hints as H


@dataclass(frozen=True)
class Mistake:
    """One wrong way to write a chapter's code.

    Attributes:
        chapter: ``"09"``.
        name: a short id (the test's parameter id).
        what: the mistake, in words.
        file, function: the fenced region it goes into (numpy_impl/FILE, FUNCTION's region).
        edits: ``(reference text, wrong text)`` pairs, applied to the region's reference
            body; a newline in the wrong text continues at the indentation of its line.
        expect: what the check's output must say.
        keyword: the ``-k`` of a quick check (the tests that catch it); None: all of them.
        avoid: what the check's output must not say (a hint naming another cause).
    """

    chapter: str
    name: str
    what: str
    file: str
    function: str
    edits: tuple[tuple[str, str], ...]
    expect: str
    keyword: str | None = None
    avoid: str | None = None


MISTAKES: list[Mistake] = [
    # -- chapter 01: tokens ----------------------------------------------------------------------
    Mistake(
        "01",
        "encode-keyerror-escapes",
        "the KeyError of the lookup let out, not self._unknown_error(text)",
        "char_tokenizer.py",
        "CharTokenizer.encode",
        (("except KeyError:", "except IndexError:"),),
        "KeyError 'x' escaped encode",
        "unknown_characters",
    ),
    Mistake(
        "01",
        "decode-negative-id-wraps",
        "a negative id not rejected: it wraps round to the end of chars",
        "char_tokenizer.py",
        "CharTokenizer.decode",
        (("if not 0 <= i < self.vocab_size:", "if not i < self.vocab_size:"),),
        "a negative id wrapped round",
        "decode_rejects_bad_ids",
    ),
    Mistake(
        "01",
        "decode-accepts-bool",
        "True accepted as an id (the bool check left out)",
        "char_tokenizer.py",
        "CharTokenizer.decode",
        (("isinstance(i, (bool, np.bool_)) or not isinstance", "not isinstance"),),
        "True accepted as an id",
        "decode_rejects_bad_ids",
    ),
    # -- chapter 02: embeddings and linear maps ------------------------------------------------
    Mistake(
        "02",
        "embedding-repeated-ids",
        "grad[idx] += dout: a repeated id keeps one gradient",
        "embedding.py",
        "Embedding.backward",
        (
            (
                "np.add.at(self.weight.grad, self._idx.reshape(-1), flat)",
                "self.weight.grad[self._idx.reshape(-1)] += flat",
            ),
        ),
        H.REPEATED_IDS[:50],
        "Embedding or repeated",
    ),
    Mistake(
        "02",
        "embedding-assigns-grad",
        "the gradient zeroed, then written: assigned instead of accumulated",
        "embedding.py",
        "Embedding.backward",
        (("np.add.at(", "self.weight.grad[...] = 0.0\nnp.add.at("),),
        "gradients assigned instead of accumulated",
        "Embedding",
    ),
    Mistake(
        "02",
        "linear-bias-grad-first-axis",
        "the bias gradient summed over the first axis only, from (..., out) unflattened",
        "linear.py",
        "linear_backward",
        (("d2.sum(axis=0)", "dout.sum(axis=0)"),),
        "shape mismatch",
        "Linear",
    ),
    Mistake(
        "02",
        "embedding-grad-assigned-rows",
        "dW[ids] = dout: the rows assigned, repeats and old gradients lost",
        "embedding.py",
        "Embedding.backward",
        (
            (
                "np.add.at(self.weight.grad, self._idx.reshape(-1), flat)",
                "self.weight.grad[self._idx.reshape(-1)] = flat",
            ),
        ),
        "assigned instead of accumulated",
        "Embedding",
    ),
    # -- chapter 03: scaled dot-product attention ---------------------------------------------
    Mistake(
        "03",
        "softmax-over-queries",
        "the softmax over the queries (axis -2) instead of the keys",
        "attention.py",
        "scaled_dot_product_attention",
        (("probs = softmax(scores)", "probs = softmax(scores.swapaxes(-1, -2)).swapaxes(-1, -2)"),),
        "wrong softmax axis",
        "parity and scaled_dot_product_attention",
    ),
    Mistake(
        "03",
        "scores-not-scaled",
        "q k^T not multiplied by scale",
        "attention.py",
        "scaled_dot_product_attention",
        (("q @ k.swapaxes(-1, -2) * scale", "q @ k.swapaxes(-1, -2)"),),
        "scores not scaled",
        "parity and scaled_dot_product_attention",
    ),
    Mistake(
        "03",
        "mask-not-applied",
        "the mask left out",
        "attention.py",
        "scaled_dot_product_attention",
        (
            ("np.where(mask, scores, -np.inf)", "scores"),
            ("scores = scores + mask", "scores = scores"),
        ),
        "the mask is not applied",
        "parity and scaled_dot_product_attention",
    ),
    Mistake(
        "03",
        "softmax-no-max-subtraction",
        "exp of the raw scores: exp(1000) overflows",
        "attention.py",
        "softmax",
        (("e = np.exp(scores - row_max)", "e = np.exp(scores)"),),
        "subtract each row's max before exp",
        "softmax or large",
    ),
    Mistake(
        "03",
        "scores-over-d-k",
        "q k^T divided by d_k instead of sqrt(d_k) (the scale argument ignored)",
        "attention.py",
        "scaled_dot_product_attention",
        (("q @ k.swapaxes(-1, -2) * scale", "q @ k.swapaxes(-1, -2) / q.shape[-1]"),),
        H.SDPA_OVER_D_K[:30],
        "scaled_dot_product_attention",
        avoid="doubled scale",
    ),
    # -- chapter 04: multi-head attention -----------------------------------------------------
    Mistake(
        "04",
        "merge-heads-bare-reshape",
        "heads merged by a bare reshape, without moving the head axis back",
        "attention.py",
        "merge_heads",
        (("x.transpose(0, 2, 1, 3).reshape(B, T, H * d_k)", "x.reshape(B, T, H * d_k)"),),
        "heads merged with a bare reshape",
        "parity and SelfAttention",
    ),
    Mistake(
        "04",
        "no-causal-mask",
        "is_causal not passed on to the attention",
        "attention.py",
        "SelfAttention.attend",
        (("q, k, v, attn_mask, is_causal, dropout_p=p", "q, k, v, attn_mask, False, dropout_p=p"),),
        "no causal mask",
        "parity and SelfAttention",
    ),
    Mistake(
        "04",
        "split-heads-bare-reshape",
        "heads split by a bare reshape to (B, H, T, d_k), without the transpose",
        "attention.py",
        "split_heads",
        (
            (
                "x.reshape(B, T, n_heads, C // n_heads).transpose(0, 2, 1, 3)",
                "x.reshape(B, n_heads, T, C // n_heads)",
            ),
        ),
        H.SPLIT_BARE[:40],
        "parity and SelfAttention",
    ),
    Mistake(
        "04",
        "merge-heads-wrong-order",
        "heads merged with transpose(0, 2, 3, 1): the right shape, d_k before H",
        "attention.py",
        "merge_heads",
        (("x.transpose(0, 2, 1, 3)", "x.transpose(0, 2, 3, 1)"),),
        H.MERGE_WRONG_ORDER[:40],
        "parity and SelfAttention",
    ),
    # -- chapter 05: positional embeddings ----------------------------------------------------
    Mistake(
        "05",
        "positions-grad-assigned",
        "the rows' gradient assigned (=) instead of added (+=)",
        "positional.py",
        "LearnedPositionalEmbedding.backward",
        (("+= dout", "= dout"),),
        "gradients assigned instead of accumulated",
        "Learned",
    ),
    Mistake(
        "05",
        "positions-grad-whole-table",
        "dout added to the whole table, not to the rows used",
        "positional.py",
        "LearnedPositionalEmbedding.backward",
        (("self.weight.grad[start_pos : start_pos + T] += dout", "self.weight.grad += dout"),),
        "shape mismatch inside your code",
        "Learned",
    ),
    Mistake(
        "05",
        "positions-from-zero",
        "rows 0 .. T-1 returned whatever start_pos",
        "positional.py",
        "LearnedPositionalEmbedding.forward",
        (("self.weight.data[start_pos : start_pos + T]", "self.weight.data[:T]"),),
        H.POSITIONS_FROM_ZERO[:40],
        "learned_positions_from_start_pos",
    ),
    # -- chapter 06: feed-forward and GELU -----------------------------------------------------
    Mistake(
        "06",
        "gelu-tanh-for-exact",
        "the tanh approximation written for the exact (erf) GELU",
        "activations.py",
        "GELU.forward",
        (
            (
                "return x * self._cdf",
                "return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))",
            ),
        ),
        "the tanh approximation where the exact GELU is asked for",
        "GELU and parity",
    ),
    Mistake(
        "06",
        "gelu-no-half",
        "the 0.5 of the tanh GELU left out",
        "activations.py",
        "gelu_tanh",
        (("return 0.5 * x * (1 + np.tanh(u))", "return x * (1 + np.tanh(u))"),),
        H.GELU_NO_HALF,
        "GELU and parity",
    ),
    Mistake(
        "06",
        "gelu-backward-writes-dout",
        "dout *= dy_dx: the caller's dout changed",
        "activations.py",
        "gelu_tanh_backward",
        (("return dout * dy_dx", "dout *= dy_dx\nreturn dout"),),
        "was modified in place",
        "parity and GELU",
    ),
    # -- chapter 07: LayerNorm and residuals --------------------------------------------------
    Mistake(
        "07",
        "layernorm-unbiased-variance",
        "the unbiased variance (ddof=1)",
        "norm.py",
        "layer_norm",
        (
            (
                "(xc * xc).mean(axis=-1, keepdims=True)",
                "(xc * xc).sum(axis=-1, keepdims=True) / (xc.shape[-1] - 1)",
            ),
        ),
        H.LAYERNORM_UNBIASED[:40],
        "LayerNorm and parity",
    ),
    Mistake(
        "07",
        "layernorm-eps-outside-sqrt",
        "eps added outside the square root",
        "norm.py",
        "layer_norm",
        (("1.0 / np.sqrt(var + eps)", "1.0 / (np.sqrt(var) + eps)"),),
        H.LAYERNORM_EPS_OUTSIDE[:40],
        "LayerNorm and parity",
    ),
    Mistake(
        "07",
        "layernorm-no-affine",
        "the weight and bias never applied",
        "norm.py",
        "layer_norm",
        (
            ("y = xhat * weight", "y = xhat"),
            ("return (y if bias is None else y + bias), xhat, rstd", "return y, xhat, rstd"),
        ),
        H.LAYERNORM_NO_AFFINE[:40],
        "LayerNorm and parity",
    ),
    # -- chapter 08: the GPT ---------------------------------------------------------------------
    Mistake(
        "08",
        "head-tied-by-data",
        "the head tied by sharing .data: two Parameters, two gradient buffers",
        "gpt.py",
        "GPT.__init__",
        (
            (
                "self.head.weight = self.tok_emb.weight",
                "self.head.weight.data = self.tok_emb.weight.data",
            ),
        ),
        "tied by sharing .data",
        "forward_backward_parity and tanh and explicit",
    ),
    Mistake(
        "08",
        "pos-grad-not-summed",
        "the position gradient not summed over the batch",
        "gpt.py",
        "GPT.backward",
        (("self.pos_emb.backward(dx.sum(axis=0))", "self.pos_emb.backward(dx)"),),
        "shape mismatch inside your code",
        "forward_backward_parity and tanh and explicit",
    ),
    Mistake(
        "08",
        "blocks-forward-order-in-backward",
        "the blocks' backward run in forward order",
        "gpt.py",
        "GPT.backward",
        (("for block in reversed(self.blocks):", "for block in self.blocks:"),),
        H.GPT_BLOCKS_FORWARD_ORDER[:60],
        "forward_backward_parity and tanh and explicit",
    ),
    Mistake(
        "08",
        "no-final-layernorm",
        "ln_f forgotten",
        "gpt.py",
        "GPT.forward",
        (("x = self.ln_f(x)", "pass"),),
        H.GPT_NO_LN_F[:40],
        "forward_backward_parity and tanh and explicit",
    ),
    # -- chapter 09: training ----------------------------------------------------------------
    Mistake(
        "09",
        "adamw-l2-decay",
        "weight decay folded into the gradient (L2, Adam not AdamW)",
        "optim.py",
        "AdamW.step",
        (
            ("m[...] = beta1 * m", "g = g + weight_decay * p.data\nm[...] = beta1 * m"),
            (
                "(m_hat / (np.sqrt(v_hat) + eps) + weight_decay * p.data)",
                "m_hat / (np.sqrt(v_hat) + eps)",
            ),
        ),
        H.ADAMW_L2[:60],
        "adamw",
    ),
    Mistake(
        "09",
        "adamw-no-bias-correction",
        "the bias corrections left out",
        "optim.py",
        "AdamW.step",
        (("m / (1 - beta1**t)", "m"), ("v / (1 - beta2**t)", "v")),
        H.ADAMW_NO_BIAS_CORRECTION[:60],
        "adamw",
    ),
    Mistake(
        "09",
        "adamw-rebound-moments",
        "the moments rebound (m = ...) instead of updated",
        "optim.py",
        "AdamW.step",
        (("m[...] = beta1", "m = beta1"), ("v[...] = beta2", "v = beta2")),
        H.ADAMW_REBOUND[:60],
        "adamw",
    ),
    Mistake(
        "09",
        "adamw-decay-after-update",
        "weight decay applied to the updated weights",
        "optim.py",
        "AdamW.step",
        (
            (
                "p.data -= lr * (m_hat / (np.sqrt(v_hat) + eps) + weight_decay * p.data)",
                "p.data -= lr * m_hat / (np.sqrt(v_hat) + eps)\n"
                "p.data -= lr * weight_decay * p.data",
            ),
        ),
        H.ADAMW_DECAY_AFTER[:60],
        "adamw",
    ),
    Mistake(
        "09",
        "cross-entropy-divided-by-n",
        "the loss divided by N instead of the kept rows",
        "loss.py",
        "CrossEntropyLoss.forward",
        (("float(nll[keep].mean())", "float(nll[keep].sum() / N)"),),
        H.CE_DIVIDED_BY_N[:60],
        "CrossEntropy",
    ),
    Mistake(
        "09",
        "cross-entropy-no-max-subtraction",
        "exp of the raw logits (no max subtraction)",
        "loss.py",
        "CrossEntropyLoss.forward",
        (("shifted = z - z.max(axis=1, keepdims=True)", "shifted = z"),),
        "subtract the row max before exp",
        "huge_logits",
    ),
    Mistake(
        "09",
        "clip-returns-clipped-norm",
        "the norm after clipping returned",
        "optim.py",
        "clip_grad_norm_",
        (("return total_norm", "return math.sqrt(sum(float((g**2).sum()) for g in grads))"),),
        H.CLIP_RETURNS_CLIPPED[:60],
        "clip",
    ),
    Mistake(
        "09",
        "clip-per-parameter",
        "each gradient clipped by its own norm",
        "optim.py",
        "clip_grad_norm_",
        (("g *= clip_coef", "g *= min(max_norm / (math.sqrt(float((g**2).sum())) + 1e-6), 1.0)"),),
        H.CLIP_PER_PARAMETER[:60],
        "clip",
    ),
    Mistake(
        "09",
        "warmup-from-zero",
        "a warmup that starts at lr 0",
        "optim.py",
        "cosine_lr",
        (("max_lr * (step + 1) / (warmup_iters + 1)", "max_lr * step / warmup_iters"),),
        H.WARMUP_FROM_ZERO[:60],
        "lr_schedules",
    ),
    # -- chapter 10: sampling ------------------------------------------------------------------
    Mistake(
        "10",
        "filter-divides-in-place",
        "logits /= temperature: the caller's array changed",
        "sampling.py",
        "filter_logits",
        (("logits = logits / temperature", "logits /= temperature"),),
        "filter_logits modified its input",
        "filter_logits_parity",
    ),
    Mistake(
        "10",
        "top-k-exactly-k",
        "exactly k tokens kept (argsort), the ties with the k-th dropped",
        "sampling.py",
        "filter_logits",
        (
            (
                "kth = np.partition(logits, V - top_k, axis=-1)[:, V - top_k, None]",
                'drop = np.argsort(-logits, axis=-1, kind="stable")[:, top_k:]',
            ),
            (
                "logits[logits < kth] = -np.inf",
                "np.put_along_axis(logits, drop, -np.inf, axis=-1)",
            ),
        ),
        "exactly k tokens kept",
        "top_k_keeps_ties",
    ),
    Mistake(
        "10",
        "top-p-drops-crossing-token",
        "removed where the running mass exceeds top_p: the crossing token lost",
        "sampling.py",
        "filter_logits",
        (("remove_sorted = mass_before >= top_p", "remove_sorted = cum > top_p"),),
        "the token that crosses top_p was dropped",
        "crosses_the_threshold",
    ),
    Mistake(
        "10",
        "top-p-not-unsorted",
        "the top-p mask left in sorted order",
        "sampling.py",
        "filter_logits",
        (("np.put_along_axis(remove, order, remove_sorted, axis=-1)", "remove = remove_sorted"),),
        "the mask left in sorted order",
        "crosses_the_threshold",
    ),
    Mistake(
        "10",
        "one-u-per-batch",
        "one u for the whole batch",
        "sampling.py",
        "generate",
        (("rng.random((idx.shape[0], 1))", "rng.random()"),),
        "one u for the whole batch",
        "sampling_distributions_agree",
    ),
    Mistake(
        "10",
        "sampled-unfiltered",
        "sampled from softmax(logits), the filter ignored",
        "sampling.py",
        "generate",
        (
            (
                "probs = softmax(filtered.astype(np.float64))",
                "probs = softmax(logits.astype(np.float64))",
            ),
        ),
        "drew a filtered-out token",
        "sampling_distributions_agree",
    ),
    Mistake(
        "10",
        "temperature-after-filter",
        "the temperature applied to the filtered logits, after top-k and top-p",
        "sampling.py",
        "filter_logits",
        (
            ("logits = logits / temperature", "logits = logits.copy()"),
            ("return logits", "return logits / temperature"),
        ),  # fmt: skip
        H.TEMPERATURE_AFTER_FILTER[:60],
        "filter_logits_parity",
    ),
    # -- chapter 11: byte-level BPE --------------------------------------------------------------
    Mistake(
        "11",
        "merge-overlapping",
        "merge steps one element after a merge: the merges overlap",
        "tokenizer.py",
        "merge",
        (("i += 2", "i += 1"),),
        "the merges overlap",
        "merge_scans",
    ),
    Mistake(
        "11",
        "merge-drops-last",
        "the loop stops before the last element",
        "tokenizer.py",
        "merge",
        (("while i < n:", "while i < n - 1:"),),
        "the last element dropped",
        "merge_scans",
    ),
    Mistake(
        "11",
        "bpe-first-pair-found",
        "encoding merges the first known pair it meets, not the earliest-learned one",
        "tokenizer.py",
        "BPETokenizer._bpe",
        (
            (
                "if m is not None and (best is None or m[0] < best[0]):",
                "if m is not None and best is None:",
            ),
        ),
        "the first pair found merged, not the lowest-ranked",
        "earliest_learned_merge",
    ),
    # -- chapter 12: the online softmax --------------------------------------------------------
    Mistake(
        "12",
        "online-softmax-no-rescale",
        "the old sums not rescaled by alpha",
        "flash_attention.py",
        "flash_attention",
        (("l *= alpha", "pass"), ("acc *= alpha", "pass")),
        "the old sums are not rescaled",
        "flash_matches_explicit",
    ),
    Mistake(
        "12",
        "online-softmax-overwrite",
        "l and acc overwritten by each tile instead of accumulated",
        "flash_attention.py",
        "flash_attention",
        (("l += p.sum(", "l = p.sum("), ("acc += p @ v", "acc = p @ v")),
        "only the last key tile counts",
        "flash_matches_explicit",
    ),
    Mistake(
        "12",
        "online-softmax-m-updated-first",
        "m set to the new max before alpha is computed (alpha is then 1)",
        "flash_attention.py",
        "flash_attention",
        (("m_safe = np.where(", "m = m_new\nm_safe = np.where("),),
        "the old sums are not rescaled",
        "flash_matches_explicit",
    ),
    Mistake(
        "12",
        "online-softmax-l-not-rescaled",
        "acc rescaled by alpha, l not",
        "flash_attention.py",
        "flash_attention",
        (("l *= alpha", "pass"),),
        H.ONLINE_SOFTMAX["no_rescale_l"][:60],
        "flash_matches_explicit",
        avoid="constant factor",
    ),
    Mistake(
        "12",
        "online-softmax-acc-not-rescaled",
        "l rescaled by alpha, acc not",
        "flash_attention.py",
        "flash_attention",
        (("acc *= alpha", "pass"),),
        H.ONLINE_SOFTMAX["no_rescale_acc"][:60],
        "flash_matches_explicit",
    ),
    # -- chapter 13: sinusoidal positions and RoPE ----------------------------------------------
    Mistake(
        "13",
        "rope-exponent-over-d",
        "theta_i = base^(-i / d_k): every plane but the first at the wrong speed",
        "rope.py",
        "rope_cos_sin",
        (
            (
                "-np.arange(0, d_k, 2, dtype=np.float64) / d_k",
                "-np.arange(d_k // 2, dtype=np.float64) / d_k",
            ),
        ),
        "the frequencies: theta_i = base^(-2i / d_k)",
        "exact_rotations",
    ),
    Mistake(
        "13",
        "rope-rotates-by-minus-p",
        "a sign: rotated by -p",
        "rope.py",
        "apply_rope",
        (("a * cos - b * sin", "a * cos + b * sin"), ("a * sin + b * cos", "-a * sin + b * cos")),
        "rotated by -p",
        "exact_rotations",
    ),
    Mistake(
        "13",
        "rope-ignores-start-pos",
        "start_pos ignored: the positions 0 .. T - 1",
        "rope.py",
        "rope_cos_sin",
        (
            (
                "np.arange(start_pos, start_pos + T, dtype=np.float64)",
                "np.arange(T, dtype=np.float64)",
            ),
        ),
        "start_pos ignored",
        "exact_rotations",
    ),
    # -- chapter 14: RMSNorm, post-norm, SwiGLU --------------------------------------------------
    Mistake(
        "14",
        "rmsnorm-subtracts-mean",
        "the mean subtracted (LayerNorm's centring)",
        "norm.py",
        "RMSNorm.forward",
        (
            (
                "rrms = 1.0 / np.sqrt(",
                "x = x - x.mean(axis=-1, keepdims=True)\nrrms = 1.0 / np.sqrt(",
            ),
        ),
        H.RMSNORM_CENTRED[:40],
        "parity and RMSNorm",
    ),
    Mistake(
        "14",
        "rmsnorm-eps-outside-sqrt",
        "eps added outside the square root",
        "norm.py",
        "RMSNorm.forward",
        (
            (
                "1.0 / np.sqrt((x**2).mean(axis=-1, keepdims=True) + self.eps)",
                "1.0 / (np.sqrt((x**2).mean(axis=-1, keepdims=True)) + self.eps)",
            ),
        ),
        H.RMSNORM_EPS_OUTSIDE[:40],
        "parity and RMSNorm",
    ),
    Mistake(
        "14",
        "swiglu-gate-swapped",
        "the gate on the wrong branch: w3 through SiLU, w1 linear",
        "ffn.py",
        "SwiGLUFeedForward.forward",
        (("self.act(self.w1(x))", "self.w1(x)"), ("up = self.w3(x)", "up = self.act(self.w3(x))")),
        H.SWIGLU_GATE_SWAPPED[:40],
        "parity and SwiGLU",
    ),
    # -- chapter 15: encoder models and classification -------------------------------------------
    Mistake(
        "15",
        "mean-pool-counts-padding",
        "a plain mean over T: the padding counted",
        "encoder.py",
        "MeanPool.forward",
        (('return np.einsum("bt,btc->bc", self._weights, x)', "return x.mean(axis=1)"),),
        H.MEANPOOL_PLAIN[:40],
        "parity and MeanPool",
    ),
    Mistake(
        "15",
        "mean-pool-zero-over-zero",
        "divided by the count of real tokens, 0 for a row of padding",
        "encoder.py",
        "MeanPool.forward",
        (("token_mask / np.maximum(counts, 1)", "token_mask / counts"),),
        "divide by max(n, 1)",
        "mean_pool_fixed_values",
    ),
    Mistake(
        "15",
        "padded-queries-masked",
        "the padded queries masked (token_mask[:, None, :, None]) instead of the keys",
        "encoder.py",
        "TransformerClassifier.forward",
        (
            (
                "attn_mask=attn_mask)",
                "attn_mask=None if token_mask is None else token_mask[:, None, :, None])",
            ),
        ),
        H.PADDED_QUERIES_MASKED[:40],
        "padding_changes_nothing",
    ),
    # -- chapter 16: encoder-decoder and cross-attention -----------------------------------------
    Mistake(
        "16",
        "cross-kv-swapped",
        "k and v swapped in the memory's projection",
        "attention.py",
        "SelfAttention.project",
        (
            (
                "k, v = np.split(linear(kv, W[Q:], b_kv), 2, axis=-1)",
                "v, k = np.split(linear(kv, W[Q:], b_kv), 2, axis=-1)",
            ),
        ),
        H.CROSS_KV_SWAPPED[:40],
        "parity and cross",
    ),
    Mistake(
        "16",
        "decoder-not-causal",
        "the decoder's self-attention without the causal mask",
        "seq2seq.py",
        "DecoderBlock.forward",
        (("attn_mask=self_mask, is_causal=True", "attn_mask=self_mask, is_causal=False"),),
        H.DECODER_NOT_CAUSAL[:40],
        "decoder_is_causal",
    ),
    Mistake(
        "16",
        "greedy-from-first-position",
        "the next token from logits[:, 0], not the last position",
        "seq2seq.py",
        "Seq2SeqTransformer.generate",
        (("nxt = logits[:, -1].argmax(axis=-1)", "nxt = logits[:, 0].argmax(axis=-1)"),),
        H.GREEDY_WRONG_POSITION[:40],
        "greedy_decoding_identical",
    ),
    Mistake(
        "16",
        "cross-attention-causal",
        "a causal mask in the decoder's cross-attention",
        "seq2seq.py",
        "DecoderBlock.forward",
        (
            (
                "kv=memory, attn_mask=memory_mask)",
                "kv=memory, attn_mask=memory_mask, is_causal=True)",
            ),
        ),
        H.CROSS_CAUSAL[:40],
        "parity and DecoderBlock",
        avoid="doubled scale",
    ),
    # -- chapter 17: real models -----------------------------------------------------------------
    Mistake(
        "17",
        "conv1d-not-transposed",
        "GPT-2's Conv1D weights exported untransposed",
        "pretrained.py",
        "to_gpt2_state",
        (("np.ascontiguousarray(array.T if conv1d and is_conv1d else array)", "array"),),
        "a forgotten transpose",
        "conv1d_weights",
    ),
    Mistake(
        "17",
        "nanogpt-transposed",
        "nanoGPT's weights transposed too (the conv1d flag ignored)",
        "pretrained.py",
        "to_gpt2_state",
        (("array.T if conv1d and is_conv1d", "array.T if is_conv1d"),),
        "nanoGPT's weights transposed",
        "nanogpt_weights_are_renamed",
    ),
    Mistake(
        "17",
        "key-table-biases-always",
        "bias rows written for a bias=False model",
        "pretrained.py",
        "gpt2_key_table",
        (("if bias:", "if True:"),),
        "rows for parameters the model does not have",
        "key_table_names",
    ),
]


# the twelve mistakes an issue's learner pass tried (scripts/held_out_mistakes.py --twelve)
TWELVE = {"softmax-no-max-subtraction", "online-softmax-acc-not-rescaled",
          "online-softmax-l-not-rescaled", "cross-attention-causal", "merge-heads-wrong-order",
          "temperature-after-filter", "scores-over-d-k", "adamw-l2-decay",
          "greedy-from-first-position", "top-p-drops-crossing-token",
          "embedding-grad-assigned-rows", "layernorm-unbiased-variance"}  # fmt: skip


def region_of(ref: Reference, mistake: Mistake):
    regions = [
        r
        for r in ref.regions[mistake.file]
        if r.chapter == mistake.chapter and r.function == mistake.function
    ]
    assert len(regions) == 1, f"{mistake.name}: {len(regions)} regions in {mistake.function}"
    return regions[0]


def wrong_body(ref: Reference, mistake: Mistake) -> list[str]:
    """The region's reference body with the mistake's edits made (in its code, not its
    TODO lines)."""
    region = region_of(ref, mistake)
    kept, text = region.kept, "".join(region.body[len(region.kept) :])  # the TODO stays
    for old, new in mistake.edits:
        assert old in text, f"{mistake.name}: {old!r} is not in the reference's {mistake.function}"
        line_start = text.rfind("\n", 0, text.index(old)) + 1
        line = text[line_start:]
        indent = line[: len(line) - len(line.lstrip())]
        text = text.replace(old, new.replace("\n", "\n" + indent), 1)
    return [*kept, *text.splitlines(keepends=True)]


def write_mistake(ref: Reference, ws: Workspace, mistake: Mistake) -> None:
    """A workspace with the mistake's chapter started, every region of it solved but the
    one with the mistake, which holds the wrong code."""
    add_stubs(ref, ws, mistake.chapter)
    target = region_of(ref, mistake)
    for f in {r.file for r in ref.chapter_regions(mistake.chapter)}:
        path = ws.package / f
        text = path.read_text(encoding="utf-8")
        bodies = {
            r.key: (wrong_body(ref, mistake) if r.key == target.key and f == mistake.file
                    else list(r.body))
            for r in ref.regions[f]
            if r.chapter == mistake.chapter
        }  # fmt: skip
        path.write_text(
            replace_bodies(text, parse_regions(text, f, names=False), bodies), encoding="utf-8"
        )
