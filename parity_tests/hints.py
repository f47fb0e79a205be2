"""What a wrong result looks like: the usual mistakes, computed, for readable failures.

Each function here returns ``{label: wrong result}`` (the wrong result a callable,
computed only when a comparison fails). :func:`tolerances.assert_close` tries
them on a failing tensor and, when one matches, ends its message with
``hint: label``; ``python -m labs check`` prints that line under the failed
comparison. The registry (registry.py) attaches them to its pairs.
"""

from __future__ import annotations

import functools
import math

import numpy as np


# -- scaled dot-product attention, the function (chapter 03) ----------------------------------
def sdpa_variant(q, k, v, mask, is_causal, scale, axis=-1, scaled=True, masked=True):
    """Plain attention with one thing changed, as a bug would: the softmax over
    ``axis``, no ``scale``, no mask."""
    s = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ np.swapaxes(k, -1, -2)) * (s if scaled else 1.0)
    if masked and is_causal:
        scores = np.where(np.triu(np.ones(scores.shape[-2:], bool), 1), -np.inf, scores)
    elif masked and mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == np.bool_ else scores + mask
    top = np.max(scores, axis=axis, keepdims=True)
    e = np.exp(scores - np.where(np.isfinite(top), top, 0.0))
    total = np.sum(e, axis=axis, keepdims=True)
    return (e / np.where(total == 0.0, 1.0, total)) @ v


SDPA_OVER_D_K = "scores divided by d_k: the scale is 1 / sqrt(d_k), q k^T / sqrt(d_k)"


def sdpa_hints(q, k, v, attn_mask=None, is_causal=False, scale=None, **_) -> dict:
    """The output of scaled_dot_product_attention after the usual mistakes."""
    args = (q, k, v, attn_mask, is_causal, scale)
    hints = {}
    if q.shape[-1] > 1:  # d_k = 1: dividing by d_k is no scaling at all
        hints[SDPA_OVER_D_K] = lambda: sdpa_variant(q, k, v, attn_mask, is_causal, 1 / q.shape[-1])
    hints |= {
        "wrong softmax axis: your probabilities sum to 1 over the queries (axis -2); "
        "each query's row must sum to 1 over the keys (axis -1)": lambda: sdpa_variant(
            *args, axis=-2
        ),
        "scores not scaled: multiply q k^T by scale (1 / sqrt(d_k) by default)": lambda: (
            sdpa_variant(*args, scaled=False)
        ),
    }
    if attn_mask is not None or is_causal:
        hints["the mask is not applied: forbidden scores must become -inf"] = lambda: sdpa_variant(
            *args, masked=False
        )
    return hints


# -- causal self-attention, the layer (chapter 04) ---------------------------------------------
def self_attention_variant(module, x: np.ndarray, split=True, merge=True, causal=True, order="qkv"):
    """Causal SelfAttention's output computed plainly from ``module``'s weights, with a bug:
    heads split (``split=False``) or merged (``merge=False``) by a bare reshape, where the
    head axis must be moved; or no causal mask."""
    sd = module.state_dict()
    B, T, C = x.shape
    H = module.n_heads
    d = C // H

    def linear(a, name):
        bias = sd.get(f"{name}.bias")
        return a @ sd[f"{name}.weight"].T + (0.0 if bias is None else bias)

    def heads(a):  # (B, T, C) -> (B, H, T, d)
        return a.reshape(B, T, H, d).transpose(0, 2, 1, 3) if split else a.reshape(B, H, T, d)

    cut = dict(zip(order, np.split(linear(x, "qkv_proj"), 3, axis=-1), strict=True))
    q, k, v = (heads(cut[name]) for name in "qkv")
    scores = q @ np.swapaxes(k, -1, -2) / np.sqrt(d)
    if causal:
        scores = np.where(np.triu(np.ones((T, T), bool), 1), -np.inf, scores)
    p = np.exp(scores - scores.max(axis=-1, keepdims=True))
    y = (p / p.sum(axis=-1, keepdims=True)) @ v
    y = y.transpose(*{True: (0, 2, 1, 3), False: (0, 1, 2, 3), "dh": (0, 2, 3, 1)}[merge])
    y = y.reshape(B, T, C)
    return linear(y, "out_proj")


def self_attention_hints(module, x, **_) -> dict:
    """The output of causal SelfAttention after the usual mistakes of chapter 04."""
    return {
        "heads merged with a bare reshape: move the head axis back first, (B, H, T, d_k) "
        "-> (B, T, H, d_k), then reshape to (B, T, C)": lambda: self_attention_variant(
            module, x, merge=False
        ),
        "heads split (and merged) with a bare reshape: (B, T, C) -> (B, T, H, d_k), then "
        "swap the T and H axes": lambda: self_attention_variant(
            module, x, split=False, merge=False
        ),
        "no causal mask: position t must not see the positions after it": lambda: (
            self_attention_variant(module, x, causal=False)
        ),
        SPLIT_BARE: lambda: self_attention_variant(module, x, split=False),
        MERGE_WRONG_ORDER: lambda: self_attention_variant(module, x, merge="dh"),
        QKV_ORDER: lambda: self_attention_variant(module, x, order="kqv"),
    }


SPLIT_BARE = (
    "heads split with a bare reshape: (B, T, C) -> (B, T, H, d_k), then swap the T and H axes"
)


MERGE_WRONG_ORDER = (
    "heads merged in the wrong order: (B, H, T, d_k) -> (B, T, H, d_k) is transpose(0, 2, 1, "
    "3); yours puts d_k before H, so the heads' channels interleave"
)
QKV_ORDER = "q, k, v cut in another order: qkv_proj(x) holds q, then k, then v (B, T, 3C)"

# -- learned positions (chapter 05) ------------------------------------------------------------
POSITIONS_FROM_ZERO = (
    "rows 0 .. T-1 whatever start_pos: forward reads rows start_pos .. start_pos + T - 1"
)


# -- the online softmax (chapter 12) ------------------------------------------------------------
def online_softmax_variant(q, k, v, mask, is_causal, scale, tile_k: int, mistake: str):
    """Tiled attention with one classic online-softmax mistake: ``"no_rescale"`` (neither
    sum rescaled), ``"no_rescale_l"``, ``"no_rescale_acc"`` or ``"overwrite"``."""
    scale = 1.0 / np.sqrt(q.shape[-1]) if scale is None else scale
    scores = sdpa_scores(q, k, mask, is_causal, scale)  # (..., Tq, Tk), -inf where masked
    m = np.full((*q.shape[:-1], 1), -np.inf)
    l, acc = np.zeros_like(m), np.zeros((*q.shape[:-1], v.shape[-1]))
    for c0 in range(0, k.shape[-2], tile_k):
        s = scores[..., c0 : c0 + tile_k]
        m_new = np.maximum(m, s.max(axis=-1, keepdims=True))
        m_safe = np.where(np.isfinite(m_new), m_new, 0.0)
        alpha = np.exp(m - m_safe)
        p = np.exp(s - m_safe)
        l_alpha = 1.0 if mistake in ("no_rescale", "no_rescale_l") else alpha
        acc_alpha = 1.0 if mistake in ("no_rescale", "no_rescale_acc") else alpha
        if mistake == "overwrite":
            l, acc = p.sum(axis=-1, keepdims=True), p @ v[..., c0 : c0 + tile_k, :]
        else:
            l = l_alpha * l + p.sum(axis=-1, keepdims=True)
            acc = acc_alpha * acc + p @ v[..., c0 : c0 + tile_k, :]
        m = m_new
    return acc / np.where(l == 0.0, 1.0, l)


def sdpa_scores(q, k, mask, is_causal, scale):
    """``q k^T scale``, -inf where ``mask`` (bool) is False or ``is_causal`` hides a key."""
    scores = (q @ np.swapaxes(k, -1, -2)) * scale
    if is_causal:
        scores = np.where(np.triu(np.ones(scores.shape[-2:], bool), 1), -np.inf, scores)
    if mask is not None:
        scores = np.where(mask, scores, -np.inf) if mask.dtype == np.bool_ else scores + mask
    return scores


OLD_SUMS = "the old sums are not rescaled: multiply {} by alpha = exp(m - m_new) before adding "
ONLINE_SOFTMAX = {
    "no_rescale": OLD_SUMS.format("l and acc") + "the new tile",
    "no_rescale_l": OLD_SUMS.format("l (acc is)") + "the new tile's row sums",
    "no_rescale_acc": OLD_SUMS.format("acc (l is)") + "the new tile's p @ v",
    "overwrite": "only the last key tile counts: accumulate l and acc over the tiles "
    "(l = alpha l + ..., acc = alpha acc + ...), do not overwrite them",
}


def online_softmax_hints(q, k, v, attn_mask, is_causal, scale, tile_k, **_) -> dict:
    """What a flash output looks like after the usual online-softmax mistakes."""
    if k.shape[-2] <= tile_k:
        return {}
    args = (q, k, v, attn_mask, is_causal, scale, tile_k)
    return {label: functools.partial(online_softmax_variant, *args, mistake)
            for mistake, label in ONLINE_SOFTMAX.items()}  # fmt: skip


# -- sampling (chapter 10) ----------------------------------------------------------------------
TEMPERATURE_AFTER_FILTER = (
    "the temperature applied after top-k/top-p: divide by it first, then filter the scaled "
    "logits (top-p's probabilities depend on the temperature)"
)


# -- the embedding's gradient (chapter 02) ------------------------------------------------------
REPEATED_IDS = (
    "repeated ids keep one gradient: `grad[idx] += dout` writes each row once; "
    "np.add.at(grad, idx, dout) adds every occurrence"
)


def buffered_scatter(idx: np.ndarray, dout: np.ndarray, num_embeddings: int) -> np.ndarray:
    """The table gradient ``grad[idx] += dout`` gives from zeros: one write per repeated id."""
    grad = np.zeros((num_embeddings, dout.shape[-1]), dtype=np.float64)
    grad[np.asarray(idx).reshape(-1)] += dout.reshape(-1, dout.shape[-1])
    return grad


# -- training (chapter 09) ----------------------------------------------------------------------
CE_DIVIDED_BY_N = (
    "divided by N, all the rows, instead of the kept rows: the mean of the nll runs over "
    "the positions whose target is not ignore_index (nll[keep].mean())"
)
CE_IGNORED_COUNTED = (
    "the ignored rows are counted: their nll went into the mean; keep only the rows whose "
    "target is not ignore_index"
)


def cross_entropy_hints(module, logits, targets, **_) -> dict:
    """The loss of CrossEntropyLoss after the usual mistakes of chapter 09."""
    V = logits.shape[-1]
    z = logits.reshape(-1, V).astype(np.float64)
    t = np.asarray(targets).reshape(-1)
    keep = t != module.ignore_index
    if keep.all() or not keep.any():
        return {}  # nothing ignored (or everything): the mistakes give the right loss
    t_safe = np.where(keep, t, 0)
    top = z.max(axis=1, keepdims=True)
    nll = np.log(np.exp(z - top).sum(axis=1)) - (z - top)[np.arange(len(t)), t_safe]
    return {
        CE_DIVIDED_BY_N: lambda: float(nll[keep].sum() / len(t)),
        CE_IGNORED_COUNTED: lambda: float(nll.mean()),
    }


ADAMW_L2 = (
    "weight decay folded into the gradient (L2 style, g + weight_decay p): AdamW decouples "
    "it, p -= lr (m_hat / (sqrt(v_hat) + eps) + weight_decay p), outside the Adam ratio"
)
ADAMW_NO_BIAS_CORRECTION = (
    "no bias correction: divide m by (1 - beta1^t) and v by (1 - beta2^t), t = 1 at the first step"
)
ADAMW_REBOUND = (
    "the moments were rebound, not updated: `m = beta1 * m + ...` makes a new local array "
    "and the optimizer's state keeps its zeros; write into it: m[...] = beta1 * m + ..."
)
ADAMW_DECAY_AFTER = (
    "weight decay applied after the Adam update (to the new p): it uses p before the step"
)


def adamw_variant(params, grads, lrs, betas, eps, decays, mistake: str = "") -> tuple:
    """AdamW run plainly over ``grads`` (per step, a list like ``params``) with the step's
    learning rate from ``lrs`` and each parameter's weight decay from ``decays``, with one
    mistake: ``"l2"``, ``"no_bias_correction"``, ``"rebound"``, ``"decay_after"`` (or none).
    Returns ``(params, exp_avgs, exp_avg_sqs)`` after the last step."""
    beta1, beta2 = betas
    p = [np.array(x, dtype=np.float64) for x in params]
    m = [np.zeros_like(x) for x in p]
    v = [np.zeros_like(x) for x in p]
    for t, (step_grads, lr) in enumerate(zip(grads, lrs, strict=True), start=1):
        for i, g in enumerate(step_grads):
            wd = decays[i]
            if mistake == "l2":
                g = g + wd * p[i]
            m_new = beta1 * m[i] + (1 - beta1) * g
            v_new = beta2 * v[i] + (1 - beta2) * g**2
            if mistake != "rebound":
                m[i], v[i] = m_new, v_new
            if mistake == "no_bias_correction":
                m_hat, v_hat = m_new, v_new
            else:
                m_hat, v_hat = m_new / (1 - beta1**t), v_new / (1 - beta2**t)
            adam = m_hat / (np.sqrt(v_hat) + eps)
            if mistake == "l2":
                p[i] = p[i] - lr * adam
            elif mistake == "decay_after":
                p[i] = p[i] - lr * adam
                p[i] = p[i] - lr * wd * p[i]
            else:
                p[i] = p[i] - lr * (adam + wd * p[i])
    return p, m, v


def adamw_hints(params, grads, lrs, betas, eps, decays) -> dict:
    """``{"weight": [...], "exp_avg": [...], "exp_avg_sq": [...]}``, each a list (one per
    parameter) of ``{label: wrong value}``: what AdamW's results look like after the usual
    mistakes of chapter 09."""
    runs = {
        label: functools.partial(adamw_variant, params, grads, lrs, betas, eps, decays, mistake)
        for label, mistake in (
            (ADAMW_L2, "l2"),
            (ADAMW_NO_BIAS_CORRECTION, "no_bias_correction"),
            (ADAMW_REBOUND, "rebound"),
            (ADAMW_DECAY_AFTER, "decay_after"),
        )
    }
    cached = functools.lru_cache(maxsize=None)(lambda label: runs[label]())
    out = {}
    for k, key in enumerate(("weight", "exp_avg", "exp_avg_sq")):
        out[key] = [
            {label: functools.partial(lambda label, k, i: cached(label)[k][i], label, k, i)
             for label in runs}
            for i in range(len(params))
        ]  # fmt: skip
    return out


CLIP_RETURNS_CLIPPED = (
    "the norm after clipping returned: return the global norm measured before the "
    "gradients were scaled"
)
CLIP_PER_PARAMETER = (
    "each gradient clipped by its own norm: the norm is global, sqrt of the sum of g^2 over "
    "every parameter, and one factor scales them all"
)
CLIP_NO_EPSILON = "max_norm / norm without torch's + 1e-6: the factor is max_norm / (norm + 1e-6)"


def clip_hints(grads, max_norm: float) -> dict:
    """``(norm hints, [per-gradient hints])``: what clip_grad_norm_ returns and leaves in
    the gradients after the usual mistakes of chapter 09."""
    grads = [np.asarray(g, dtype=np.float64) for g in grads]
    norm = float(np.sqrt(sum(np.sum(g**2) for g in grads)))
    coef = max_norm / (norm + 1e-6)
    after = norm * min(coef, 1.0)
    norm_hints = {CLIP_RETURNS_CLIPPED: after} if coef < 1.0 else {}
    per_grad = []
    for g in grads:
        own = float(np.sqrt(np.sum(g**2)))
        hints = {CLIP_PER_PARAMETER: g * min(max_norm / (own + 1e-6), 1.0)}
        if coef < 1.0:
            hints[CLIP_NO_EPSILON] = g * (max_norm / norm)
        per_grad.append(hints)
    return {"norm": norm_hints, "grads": per_grad}


WARMUP_FROM_ZERO = (
    "the warmup starts at 0: max_lr * step / warmup_iters gives lr 0 at step 0, a step that "
    "moves nothing; the schedule is max_lr * (step + 1) / (warmup_iters + 1)"
)
WARMUP_WITHOUT_PLUS_ONE = (
    "warmup as max_lr * (step + 1) / warmup_iters: the denominator is warmup_iters + 1 "
    "(nanoGPT's get_lr)"
)


def cosine_lr_variant(step, max_lr, min_lr, warmup, decay, mistake: str) -> float:
    """nanoGPT's schedule with one mistake in the warmup."""
    if step < warmup:
        if mistake == "from_zero":
            return max_lr * step / warmup
        return max_lr * (step + 1) / warmup
    if step > decay or decay == warmup:
        return min_lr
    ratio = (step - warmup) / (decay - warmup)
    return min_lr + 0.5 * (1.0 + np.cos(np.pi * ratio)) * (max_lr - min_lr)


def schedule_hints(steps: int, max_lr, min_lr, warmup, decay) -> dict:
    """The learning rates of steps 0 .. steps - 1 after the usual warmup mistakes."""
    if warmup == 0:
        return {}

    def run(mistake):
        return lambda: [
            cosine_lr_variant(s, max_lr, min_lr, warmup, decay, mistake) for s in range(steps)
        ]

    return {WARMUP_FROM_ZERO: run("from_zero"), WARMUP_WITHOUT_PLUS_ONE: run("no_plus_one")}


# -- GELU (chapter 06) and LayerNorm (chapter 07) ------------------------------------------------
GELU_OTHER_FORM = {
    "none": "the tanh approximation where the exact GELU is asked for: x Phi(x), with "
    "Phi(x) = (1 + erf(x / sqrt(2))) / 2",
    "tanh": "the exact erf GELU where the tanh approximation is asked for: "
    "0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))",
}
GELU_NO_HALF = "GELU without its 0.5: 0.5 x (1 + ...), not x (1 + ...)"


def gelu_variant(x: np.ndarray, form: str, half: bool = True) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if form == "tanh":
        y = x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3)))
    else:
        y = x * (1 + np.vectorize(math.erf)(x / np.sqrt(2)))
    return 0.5 * y if half else y


def gelu_hints(module, x, **_) -> dict:
    """GELU's output after the usual mistakes of chapter 06."""
    form = "tanh" if module.approximate == "tanh" else "none"
    other = "none" if form == "tanh" else "tanh"
    return {
        GELU_OTHER_FORM[form]: lambda: gelu_variant(x, other),
        GELU_NO_HALF: lambda: gelu_variant(x, form, half=False),
    }


LAYERNORM_UNBIASED = (
    "unbiased variance (ddof=1, dividing by C - 1): LayerNorm divides by C, x.var(axis=-1)"
)
LAYERNORM_EPS_OUTSIDE = (
    "eps outside the square root: 1 / sqrt(var + eps), not 1 / (sqrt(var) + eps)"
)
LAYERNORM_NO_AFFINE = "weight and bias not applied: y = xhat * weight + bias"


def layernorm_variant(module, x, ddof: int = 0, eps_inside: bool = True, affine: bool = True):
    x = np.asarray(x, dtype=np.float64)
    mean = x.mean(axis=-1, keepdims=True)
    var = x.var(axis=-1, keepdims=True, ddof=ddof)
    rstd = 1.0 / np.sqrt(var + module.eps) if eps_inside else 1.0 / (np.sqrt(var) + module.eps)
    y = (x - mean) * rstd
    if affine:
        y = y * module.weight.data
        if module.bias is not None:
            y = y + module.bias.data
    return y


def layernorm_hints(module, x, **_) -> dict:
    """LayerNorm's output after the usual mistakes of chapter 07."""
    hints = {
        LAYERNORM_EPS_OUTSIDE: lambda: layernorm_variant(module, x, eps_inside=False),
        LAYERNORM_NO_AFFINE: lambda: layernorm_variant(module, x, affine=False),
    }
    if x.shape[-1] > 1:
        hints[LAYERNORM_UNBIASED] = lambda: layernorm_variant(module, x, ddof=1)
    return hints


# -- the GPT (chapter 08) ------------------------------------------------------------------------
GPT_NO_LN_F = "no final LayerNorm: the logits are head(ln_f(x)), after the last block"
GPT_LN_F_TWICE = "the final LayerNorm applied twice: head(ln_f(x)), once"
GPT_BLOCKS_FORWARD_ORDER = (
    "the blocks run in forward order during backward: each block's backward needs the "
    "gradient of its own output, so go through them in reverse (reversed(self.blocks))"
)


def gpt_variant(module, idx: np.ndarray, final) -> np.ndarray:
    """The GPT's logits from its own layers, ``final`` in place of ``ln_f`` (the blocks see
    the inputs of the real forward, so their caches are left as they were)."""
    T = idx.shape[1]
    x = module.tok_emb(idx)
    if module.pos_emb is not None:
        x = x + module.pos_emb(T, 0)
    for block in module.blocks:
        x = block(x, is_causal=True)
    return module.head(final(x))


def gpt_hints(module, idx, **_) -> dict:
    """The GPT's logits after the usual mistakes of chapter 08 (no dropout in the tests)."""
    return {
        GPT_NO_LN_F: lambda: gpt_variant(module, idx, lambda x: x),
        GPT_LN_F_TWICE: lambda: gpt_variant(module, idx, lambda x: module.ln_f(module.ln_f(x))),
    }


def gpt_blocks_forward_order(module, idx: np.ndarray, dlogits: np.ndarray) -> dict:
    """``{parameter name: gradient}`` of a copy of the GPT whose backward walks the blocks
    in forward order (its layers' own backwards; the model itself untouched)."""
    import copy

    model = copy.deepcopy(module)
    model.forward(idx)
    model.zero_grad()
    dx = model.ln_f.backward(model.head.backward(dlogits))
    for block in model.blocks:  # the mistake: not reversed
        dx = block.backward(dx)
    dx = model.drop.backward(dx)
    if model.pos_emb is not None:
        model.pos_emb.backward(dx.sum(axis=0))
    model.tok_emb.backward(dx)
    return {name: p.grad for name, p in model.named_parameters()}


# -- RMSNorm and SwiGLU (chapter 14) -------------------------------------------------------------
RMSNORM_CENTRED = "the mean subtracted: that is LayerNorm; RMSNorm divides x by its rms, uncentred"
RMSNORM_EPS_OUTSIDE = "eps outside the square root: x / sqrt(mean(x^2) + eps), not x / (rms + eps)"
SWIGLU_GATE_SWAPPED = (
    "the gate on the wrong branch: w2(act(w1(x)) * w3(x)), SiLU on w1's output, w3 linear"
)


def rmsnorm_variant(module, x, centred: bool = False, eps_inside: bool = True) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if centred:
        x = x - x.mean(axis=-1, keepdims=True)
    ms = (x**2).mean(axis=-1, keepdims=True)
    rrms = 1.0 / np.sqrt(ms + module.eps) if eps_inside else 1.0 / (np.sqrt(ms) + module.eps)
    return x * rrms * module.weight.data


def rmsnorm_hints(module, x, **_) -> dict:
    """RMSNorm's output after the usual mistakes of chapter 14."""
    return {
        RMSNORM_CENTRED: lambda: rmsnorm_variant(module, x, centred=True),
        RMSNORM_EPS_OUTSIDE: lambda: rmsnorm_variant(module, x, eps_inside=False),
    }


def swiglu_hints(module, x, **_) -> dict:
    """SwiGLU's output with the gate on w3's branch (computed from the weights, so the
    layers' caches are untouched; no dropout in the tests)."""
    sd = module.state_dict()

    def linear(a, name):
        bias = sd.get(f"{name}.bias")
        return a @ sd[f"{name}.weight"].T + (0.0 if bias is None else bias)

    def swapped():
        x64 = np.asarray(x, dtype=np.float64)
        g = linear(x64, "w3")
        return linear(g / (1.0 + np.exp(-g)) * linear(x64, "w1"), "w2")

    return {SWIGLU_GATE_SWAPPED: swapped}


# -- encoder models (chapter 15) -----------------------------------------------------------------
MEANPOOL_PLAIN = (
    "a plain mean over T: the padding counted; average the real tokens only, "
    "sum_t m_bt x_bt / max(n_b, 1)"
)
PADDED_QUERIES_MASKED = (
    "the padded queries masked instead of the padded keys: the mask is (B, 1, 1, T), "
    "key_padding_attn_mask(token_mask), so no query reads padding"
)


def mean_pool_hints(module, x, token_mask=None, **_) -> dict:
    """MeanPool's output after the usual mistake of chapter 15."""
    if token_mask is None or np.all(token_mask):
        return {}
    return {MEANPOOL_PLAIN: lambda: np.asarray(x, dtype=np.float64).mean(axis=1)}


def classifier_queries_masked(module, idx: np.ndarray, token_mask: np.ndarray) -> np.ndarray:
    """The TransformerClassifier's logits with the padded queries masked, ``token_mask[:,
    None, :, None]``, where the keys should be (its own layers; no dropout)."""
    T = idx.shape[1]
    x = module.tok_emb(idx) + module.pos_enc(T)
    x = module.encoder(x, attn_mask=token_mask[:, None, :, None])
    return module.head(module.pool(x, token_mask))


# -- cross-attention and decoding (chapter 16) ---------------------------------------------------
CROSS_KV_SWAPPED = (
    "k and v swapped: linear(kv, W[C:]) is (B, S, 2C), k the first half, v the second"
)
CROSS_WRONG_ROWS = (
    "the wrong rows of qkv_proj for the memory: W_q is rows 0 .. C-1, W_k and W_v rows C .. 3C-1"
)
DECODER_NOT_CAUSAL = (
    "positions 0..t see the later targets: the decoder's self-attention must be causal "
    "(is_causal=True)"
)
GREEDY_WRONG_POSITION = (
    "every step drew the same token: take the next token from the last position's "
    "logits, logits[:, -1]"
)


CROSS_CAUSAL = (
    "a causal mask in the cross-attention: each target position reads every source position "
    "(only memory_mask hides some); only the decoder's self-attention is causal"
)


def decoder_block_hints(module, x, memory, self_mask=None, memory_mask=None, **_) -> dict:
    """DecoderBlock's output with the cross-attention causal too (its own layers)."""

    def causal_cross():
        h = x + module.self_attn(module.ln1(x), attn_mask=self_mask, is_causal=True)
        h = h + module.cross_attn(module.ln2(h), kv=memory, attn_mask=memory_mask, is_causal=True)
        return h + module.ffn(module.ln3(h))

    return {CROSS_CAUSAL: causal_cross}


def cross_attention_variant(module, x, kv, attn_mask, mistake: str) -> np.ndarray:
    """Cross-attention computed plainly from ``module``'s weights, with k and v swapped
    (``"swapped"``) or taken from the rows 0 .. 2C-1 (``"rows"``)."""
    sd = module.state_dict()
    W, b = sd["qkv_proj.weight"], sd.get("qkv_proj.bias")
    C, H = module.d_model, module.n_heads

    def lin(a, rows):
        return a @ W[rows].T + (0.0 if b is None else b[rows])

    def heads(a):  # (B, L, C) -> (B, H, L, d)
        return a.reshape(*a.shape[:2], H, C // H).transpose(0, 2, 1, 3)

    q = lin(np.asarray(x, np.float64), slice(0, C))
    kv_rows = slice(0, 2 * C) if mistake == "rows" else slice(C, 3 * C)
    k, v = np.split(lin(np.asarray(kv, np.float64), kv_rows), 2, axis=-1)
    if mistake == "swapped":
        k, v = v, k
    y = sdpa_variant(heads(q), heads(k), heads(v), attn_mask, False, None)
    y = y.transpose(0, 2, 1, 3).reshape(*np.shape(x)[:2], C)
    out_b = sd.get("out_proj.bias")
    return y @ sd["out_proj.weight"].T + (0.0 if out_b is None else out_b)


def cross_attention_hints(module, x, kv=None, attn_mask=None, **_) -> dict:
    """Cross-attention's output after the usual mistakes of chapter 16."""
    if kv is None:
        return {}
    return {
        CROSS_KV_SWAPPED: lambda: cross_attention_variant(module, x, kv, attn_mask, "swapped"),
        CROSS_WRONG_ROWS: lambda: cross_attention_variant(module, x, kv, attn_mask, "rows"),
    }
