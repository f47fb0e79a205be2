"""The fast backend: the same formulas, written for speed, applied to a model from outside.

The layers in ``numpy_impl`` read as their equations: each step a new array, each
NumPy call a pass over it. PyTorch runs each of those layers as one fused kernel.
This module holds the same computations with fewer passes and temporaries:

* **in place**: a step writes into an array the function owns (``out=``, ``*=``);
* **row sums by** ``np.einsum``: one vectorised loop per row sum, no product temporary;
* **algebra that saves a pass**: GELU's ``sqrt(2/pi) (x + a x^3)`` as ``x (c + a c x^2)``;
* **a sort instead of a scatter**: the embedding's backward sums each id's rows once;
* **tiles** where they pay: FlashAttention once the keys outgrow one tile;
* **one buffer**: AdamW over all parameters in a few calls (:func:`adamw_step`).

:func:`accelerate` swaps a model's layers for their fast forms (:data:`FAST_FORMS`); the
training backend applies it (``labs/plumbing/backends_numpy.py``), and the layers never
know. ``parity_tests/test_fast.py`` proves every form equal to its formula, and a whole
accelerated GPT equal to the plain one. Source: the split of llm.c's reference
``train_gpt2.py`` and its kernels, and of minitorch's ``TensorBackend(FastOps)``.
"""

from __future__ import annotations

import math

import numpy as np

from .activations import GELU
from .attention import (
    AttentionCache,
    SelfAttention,
    attention_inputs,
    merge_heads,
    repeat_kv,
    split_heads,
)
from .embedding import Embedding
from .flash_attention import flash_attention
from .flat_buffers import FlatParameters
from .module import Module, check_float, check_last_dim
from .norm import LayerNorm

#: GELU's constants (Hendrycks & Gimpel 2016, sec. 2): u = SQRT_2_OVER_PI (x + GELU_A x^3)
SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
GELU_A = 0.044715


# -- kernels: one function per formula ------------------------------------------------------
def row_sums(x: np.ndarray, y: np.ndarray | None = None) -> np.ndarray:
    """sum over the last axis of x (..., C), or of x * y without its temporary: (...).

    einsum sums contiguous rows of at most ``np.getbufsize()`` numbers whole (longer rows:
    NumPy's ``sum``), so a row's sum does not depend on the rows beside it.
    """
    x = x if x.flags.c_contiguous else np.ascontiguousarray(x)
    if x.shape[-1] > np.getbufsize():
        return x.sum(axis=-1) if y is None else np.multiply(x, y, order="C").sum(axis=-1)
    if y is None:
        return np.einsum("...c->...", x)
    y = y if y.flags.c_contiguous else np.ascontiguousarray(y)
    return np.einsum("...c,...c->...", x, y)


def layer_norm(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, eps: float):
    """``norm.layer_norm``: y, xhat (..., C) and rstd (..., 1), xhat built in place."""
    C = x.shape[-1]
    xhat = x - (row_sums(x) / C)[..., None]  # (..., C): the centred rows
    rstd = (1.0 / np.sqrt(row_sums(xhat, xhat) / C + eps))[..., None]  # (..., 1)
    xhat *= rstd
    y = xhat * weight
    if bias is not None:
        y += bias
    return y, xhat, rstd


def layer_norm_backward(dout, xhat, rstd, weight) -> np.ndarray:
    """``norm.layer_norm_backward``: dx = rstd / C (C dxhat - sum(dxhat) - xhat sum(dxhat xhat))."""
    C = xhat.shape[-1]
    dx = dout * weight  # (..., C): dxhat, made dx in place
    sum_dxhat = row_sums(dx)[..., None]  # (..., 1)
    sum_dxhat_xhat = row_sums(dx, xhat)[..., None]  # (..., 1)
    dx *= C
    dx -= sum_dxhat
    dx -= xhat * sum_dxhat_xhat
    dx *= rstd / C
    return dx


def gelu_tanh(x: np.ndarray) -> np.ndarray:
    """``activations.gelu_tanh``: y = 0.5 x (1 + tanh(u)), u = x (c + a c x^2), in one array."""
    if np.ndim(x) == 0:  # out= cannot take a scalar
        return gelu_tanh(np.reshape(x, 1))[0]
    with np.errstate(over="ignore"):  # x^2 = inf past |x| ~ 1e19: tanh = +-1, the limit
        y = x * x
        y *= GELU_A * SQRT_2_OVER_PI
        y += SQRT_2_OVER_PI
        y *= x  # u
    np.tanh(y, out=y)
    y += 1.0
    y *= 0.5  # before x: (1 + t) x overflows past half the largest float, 0.5 x does not
    y *= x
    return y


def gelu_tanh_backward(dout: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``activations.gelu_tanh_backward``: dout (0.5 (1 + t) + 0.5 x (1 - t^2) du/dx)."""
    if np.ndim(x) == 0 and np.ndim(dout) == 0:
        return gelu_tanh_backward(np.reshape(dout, 1), np.reshape(x, 1))[0]
    with np.errstate(over="ignore"):
        x2 = x * x
        t = x2 * (GELU_A * SQRT_2_OVER_PI)
        t += SQRT_2_OVER_PI
        t *= x  # u
        x2 *= 3 * GELU_A * SQRT_2_OVER_PI
        x2 += SQRT_2_OVER_PI  # du/dx
    np.tanh(t, out=t)
    s = t * t
    np.subtract(1.0, s, out=s)  # 1 - t^2
    s *= x
    s *= x2  # x (1 - t^2) du/dx
    t += 1.0
    t += s
    t *= 0.5
    t *= dout
    return t


def attention(q, k, v, mask, scale: float, keep):
    """``attention.scaled_dot_product_attention``'s arithmetic: (out, probs), the scores
    scaled, masked and normalised in their own array. A row all ``-inf`` gives zeros."""
    probs = q @ k.swapaxes(-1, -2)  # (B, H, T_q, T_k): the scores, made probs in place
    probs *= scale
    if mask is not None and mask.dtype == np.bool_:
        np.copyto(probs, -np.inf, where=~mask)
    elif mask is not None:
        probs += mask
    row_max = probs.max(axis=-1, keepdims=True)  # (..., 1)
    row_max[~np.isfinite(row_max)] = 0.0  # a row all -inf: exp(-inf - 0) = 0
    probs -= row_max
    np.exp(probs, out=probs)
    total = row_sums(probs)[..., None]  # (..., 1)
    total[~(total > 0.0)] = 1.0  # a row of zeros stays zeros
    probs /= total
    out = (probs if keep is None else probs * keep) @ v  # (B, H, T_q, d_v)
    return out, probs


def attention_backward(dout: np.ndarray, cache: AttentionCache) -> tuple:
    """``attention.scaled_dot_product_attention_backward``: dS = P (dP - rowsum(dP P)),
    built in dP's array."""
    q, k, v, probs, keep, scale = cache
    dv = (probs if keep is None else probs * keep).swapaxes(-1, -2) @ dout  # (B, H, T_k, d_v)
    dS = dout @ v.swapaxes(-1, -2)  # (B, H, T_q, T_k): dP, made dS in place
    if keep is not None:
        dS *= keep
    dS -= row_sums(dS, probs)[..., None]
    dS *= probs
    dq = dS @ k  # (B, H, T_q, d_k)
    dq *= scale
    dk = dS.swapaxes(-1, -2) @ q  # (B, H, T_k, d_k)
    dk *= scale
    return dq, dk, dv


def embedding_backward(grad: np.ndarray, idx: np.ndarray, dout: np.ndarray) -> None:
    """``Embedding.backward``'s scatter-add ``grad[idx[i]] += dout[i]``: the ids sorted, each
    id's rows summed by one ``np.add.reduceat``, each sum added once (equal to rounding)."""
    ids = idx.reshape(-1)  # (N,)
    if ids.size == 0:
        return
    rows = dout.reshape(ids.size, -1)  # (N, C)
    order = np.argsort(ids, kind="stable")
    sorted_ids = ids[order]
    starts = np.flatnonzero(np.concatenate(([True], sorted_ids[1:] != sorted_ids[:-1])))
    grad[sorted_ids[starts]] += np.add.reduceat(rows[order], starts, axis=0)  # (distinct, C)


def adamw_update(p, g, m, v, t, lr, beta1, beta2, eps, weight_decay) -> None:
    """``optim.AdamW.step``'s update of one array, in place, the formula's operations in the
    formula's order (the same bits while :func:`adamw_exact` holds):
    m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
    p -= lr (m / (1 - b1^t) / (sqrt(v / (1 - b2^t)) + eps) + weight_decay p)."""
    m *= beta1
    m += (1 - beta1) * g
    v *= beta2
    g2 = g * g
    g2 *= 1 - beta2
    v += g2
    step = np.divide(v, 1 - beta2**t, out=g2)  # v_hat, then the update, in g2's memory
    np.sqrt(step, out=step)
    step += eps
    np.divide(m / (1 - beta1**t), step, out=step)
    step += weight_decay * p  # also at 0: 0 * p is NaN where p is not finite, as in the formula
    step *= lr
    p -= step


def adamw_exact(p, g, m, v, lr, beta1, beta2, eps, weight_decay, t=1) -> bool:
    """True when no operand widens p's dtype (NEP 50), so the in-place update rounds where
    the formula does: a NumPy float64 learning rate with float32 weights would not."""
    corrections = beta1**t, beta2**t
    return np.result_type(p, g, m, v, lr, beta1, beta2, eps, weight_decay, *corrections) == p.dtype


# -- the layers' fast forms ------------------------------------------------------------------
class FastLayerNorm(LayerNorm):
    """:class:`~numpy_impl.norm.LayerNorm` by :func:`layer_norm` and :func:`layer_norm_backward`."""

    def forward(self, x: np.ndarray) -> np.ndarray:
        check_float(x, "x", self.weight.dtype)
        check_last_dim(x, self.d_model, "x", "d_model")
        b = None if self.bias is None else self.bias.data
        y, self._xhat, self._rstd = layer_norm(x, self.weight.data, b, self.eps)
        return y

    def backward(self, dout: np.ndarray) -> np.ndarray:
        xhat, rstd, C = self._xhat, self._rstd, self.d_model
        self.weight.grad += np.einsum("nc,nc->c", dout.reshape(-1, C), xhat.reshape(-1, C))
        if self.bias is not None:
            self.bias.grad += dout.reshape(-1, C).sum(axis=0)
        self._xhat = self._rstd = None
        return layer_norm_backward(dout, xhat, rstd, self.weight.data)


class FastGELU(GELU):
    """:class:`~numpy_impl.activations.GELU`, its tanh form by :func:`gelu_tanh`."""

    def forward(self, x: np.ndarray) -> np.ndarray:
        if self.approximate != "tanh":
            return super().forward(x)
        check_float(x)
        self._x = x
        return gelu_tanh(x)

    def backward(self, dout: np.ndarray) -> np.ndarray:
        if self.approximate != "tanh":
            return super().backward(dout)
        x, self._x = self._x, None
        return gelu_tanh_backward(dout, x)


class FastEmbedding(Embedding):
    """:class:`~numpy_impl.embedding.Embedding`, its backward by :func:`embedding_backward`."""

    def backward(self, dout: np.ndarray) -> None:
        embedding_backward(self.weight.grad, self._idx, dout)
        self._idx = None


class FastSelfAttention(SelfAttention):
    """:class:`~numpy_impl.attention.SelfAttention` with FlashAttention's tiles where they pay
    (``attn_impl="flash"`` and keys beyond one tile: one tile is the explicit formula) and the
    explicit formula by :func:`attention` and :func:`attention_backward` elsewhere."""

    def attend(self, q, k, v, attn_mask=None, is_causal=False, start_pos=0, kv_cache=None,
               need_weights=False):  # fmt: skip
        if kv_cache is not None:
            k, v, attn_mask, is_causal = self.use_cache(k, v, start_pos, kv_cache)
        n_rep = self.n_heads // self.n_kv_heads
        k, v = repeat_kv(k, n_rep), repeat_kv(v, n_rep)  # (B, H_kv, S, d_k) -> (B, H, S, d_k)
        p = self.dropout if self.training else 0.0
        tiles = self.attn_impl == "flash" and p == 0.0 and not need_weights
        if tiles and k.shape[-2] > self.flash_tile:
            tile = self.flash_tile
            y, cache = flash_attention(q, k, v, attn_mask, is_causal, tile_q=tile, tile_k=tile)
            weights = None
        else:
            mask, scale, keep = attention_inputs(q, k, v, attn_mask, is_causal, None, p, self._rng)
            y, probs = attention(q, k, v, mask, scale, keep)
            cache = AttentionCache(q, k, v, probs, keep, scale)
            weights = probs.copy() if need_weights else None
        self._cache = None if kv_cache is not None else cache  # decoding: nothing to differentiate
        return self.out_proj(merge_heads(y)), weights  # (B, H, T, d_k) -> (B, T, C)

    def attend_backward(self, dy: np.ndarray):
        if not isinstance(self._cache, AttentionCache):
            return super().attend_backward(dy)  # the tiles' backward, or the error of no cache
        cache, self._cache = self._cache, None
        dy = split_heads(self.out_proj.backward(dy), self.n_heads)  # (B, T, C) -> (B, H, T, d_k)
        return self.repeat_backward(*attention_backward(dy, cache))


#: plain layer -> its fast form: what :func:`accelerate` swaps
FAST_FORMS = {
    LayerNorm: FastLayerNorm,
    GELU: FastGELU,
    Embedding: FastEmbedding,
    SelfAttention: FastSelfAttention,
}


def accelerate(model: Module) -> Module:
    """Give every layer of ``model`` that has a fast form its fast class, in place (the same
    object, parameters and settings: only the methods change). Returns ``model``."""
    for _, module in model.named_modules():
        fast = FAST_FORMS.get(type(module))
        if fast is not None:
            module.__class__ = fast
    return model


def adamw_step(optimizer, flat: FlatParameters) -> bool:
    """``optimizer.step()`` (an :class:`~numpy_impl.optim.AdamW`) as one :func:`adamw_update`
    per param group over ``flat``'s buffers: the same bits as the formula, parameter by
    parameter. Applies only when every group's parameters are a run of ``flat``'s (any
    order, cut into runs), ``flat`` is intact, each group's parameters share one step count
    and :func:`adamw_exact` holds; otherwise returns False having changed nothing.

    The moments move into ``flat.exp_avg`` and ``flat.exp_avg_sq``; ``optimizer.state``
    holds views of them (a state loaded from a checkpoint is copied in once).
    Source: Loshchilov & Hutter 2019, Algorithm 2; one update over many parameters as in
    NVIDIA apex's multi-tensor ``FusedAdam``.
    """
    if not flat.intact():
        return False
    plans, seen = [], set()
    for group in optimizer.param_groups:
        params = group["params"]
        if not seen.isdisjoint(map(id, params)) or any(id(p) not in flat.index for p in params):
            return False
        seen.update(map(id, params))
        states = [optimizer.state.get(p) for p in params]
        steps = {None if s is None else s["step"] for s in states}
        if len(steps) > 1:
            return False
        t = 1 if not steps or None in steps else steps.pop() + 1
        beta1, beta2 = group["betas"]
        hyper = group["lr"], beta1, beta2, group["eps"], group["weight_decay"]
        if not adamw_exact(flat.data[:1], flat.data[:1], flat.data[:1], flat.data[:1], *hyper, t=t):
            return False
        for p, s in zip(params, states, strict=True):
            moments = () if s is None else (s["exp_avg"], s["exp_avg_sq"])
            if any(np.shape(m) != p.shape or np.result_type(m) != p.dtype for m in moments):
                return False  # the formula path raises (or widens) as it always did
        plans.append((params, states, t, hyper))
    for params, states, _, _ in plans:
        for p, state in zip(params, states, strict=True):
            m, v = flat.moments(p)
            if state is None:
                optimizer.state[p] = {"step": 0, "exp_avg": m, "exp_avg_sq": v}
            elif state["exp_avg"] is not m or state["exp_avg_sq"] is not v:
                m[...], v[...] = state["exp_avg"], state["exp_avg_sq"]  # loaded: its values
                state["exp_avg"], state["exp_avg_sq"] = m, v
            optimizer.state[p]["step"] += 1
    arrays = flat.data, flat.grad, flat.exp_avg, flat.exp_avg_sq
    for params, _, t, hyper in plans:
        for lo, hi in flat.runs(params):  # elementwise: the same bits however it is cut
            adamw_update(*(x[lo:hi] for x in arrays), t, *hyper)
    return True
