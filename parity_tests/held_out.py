"""Held-out mistakes: plausible wrong code that no hint was written for.

Unlike mistakes.py's catalogue, whose hints name each mistake, these measure the
checker on what nobody foresaw: the check must fail, and should locate the mistake:
its output names the line of the learner's file where it sits (the first-divergence
report, parity_tests/divergence.py, names the first wrong variable and its line).
``expect`` is that variable (``"return"``: the value returned). The line to name is
the statement of the first edit (:func:`mistake_lines`). scripts/held_out_mistakes.py
measures the whole list; test_divergence.py checks one per chapter.
"""

from __future__ import annotations

import ast

from parity_tests.mistakes import Mistake, region_of

HELD_OUT: list[Mistake] = [
    Mistake(
        "01",
        "decode-joins-with-spaces",
        "the characters joined with spaces",
        "char_tokenizer.py",
        "CharTokenizer.decode",
        (('return "".join(out)', 'return " ".join(out)'),),
        "return",
        "roundtrip or decode",
    ),
    Mistake(
        "02",
        "bias-grad-mean",
        "the bias gradient averaged over the rows, not summed",
        "linear.py",
        "linear_backward",
        (("d2.sum(axis=0)", "d2.mean(axis=0)"),),
        "dbias",
        "Linear",
    ),
    Mistake(
        "02",
        "linear-rows-flattened-transposed",
        "x flattened to (in, N), then transposed: the rows' numbers mixed up",
        "linear.py",
        "linear",
        (("x2 = x.reshape(-1, weight.shape[1])", "x2 = x.reshape(weight.shape[1], -1).T"),),
        "x2",
        "Linear",
    ),
    Mistake(
        "03",
        "backward-rowsum-without-probs",
        "the softmax backward's row sum of dP, not dP * P",
        "attention.py",
        "scaled_dot_product_attention_backward",
        (("(dP * probs).sum(", "dP.sum("),),
        "dS",
        "scaled_dot_product_attention",
    ),
    Mistake(
        "03",
        "backward-dk-not-transposed",
        "dk = dS q: dS not transposed",
        "attention.py",
        "scaled_dot_product_attention_backward",
        (("dk = dS.swapaxes(-1, -2) @ q", "dk = dS @ q"),),
        "dk",
        "scaled_dot_product_attention",
    ),
    Mistake(
        "03",
        "bool-mask-inverted",
        "a bool mask read the other way round: True masks a key out",
        "attention.py",
        "scaled_dot_product_attention",
        (("np.where(mask, scores, -np.inf)", "np.where(mask, -np.inf, scores)"),),
        "scores",
        "scaled_dot_product_attention",
    ),
    Mistake(
        "04",
        "project-k-q-swapped",
        "q and k taken in the wrong order from the packed projection",
        "attention.py",
        "SelfAttention.project",
        (("q, k, v = np.split(", "k, q, v = np.split("),),
        "k",
        "SelfAttention",
    ),
    Mistake(
        "04",
        "attend-backward-skips-out-proj",
        "the output projection's backward left out: dy split into heads as it came",
        "attention.py",
        "SelfAttention.attend_backward",
        (
            (
                "split_heads(self.out_proj.backward(dy), self.n_heads)",
                "split_heads(dy, self.n_heads)",
            ),
        ),
        "dy",
        "SelfAttention",
    ),
    Mistake(
        "05",
        "positions-grad-from-zero",
        "the rows 0 .. T-1 of the gradient, whatever start_pos",
        "positional.py",
        "LearnedPositionalEmbedding.backward",
        (("self.weight.grad[start_pos : start_pos + T]", "self.weight.grad[:T]"),),
        "self.weight.grad",
        "Learned",
    ),
    Mistake(
        "05",
        "positions-off-by-one",
        "the rows of positions start_pos + 1 .. start_pos + T",
        "positional.py",
        "LearnedPositionalEmbedding.forward",
        (("[start_pos : start_pos + T]", "[start_pos + 1 : start_pos + T + 1]"),),
        "return",
        "Learned",
    ),
    Mistake(
        "06",
        "gelu-backward-one-minus-t",
        "1 - t where 1 - t**2 belongs",
        "activations.py",
        "gelu_tanh_backward",
        (("(1 - t**2)", "(1 - t)"),),
        "dy_dx",
        "GELU",
    ),
    Mistake(
        "06",
        "ffn-no-activation",
        "the activation left out of the feed-forward",
        "ffn.py",
        "FeedForward.forward",
        (("h = self.act(self.fc1(x))", "h = self.fc1(x)"),),
        "h",
        "FeedForward",
    ),
    Mistake(
        "07",
        "layernorm-backward-no-xhat-term",
        "the xhat * sum(dxhat * xhat) term left out",
        "norm.py",
        "layer_norm_backward",
        (("sum_dxhat - xhat * sum_dxhat_xhat)", "sum_dxhat)"),),
        "return",
        "LayerNorm",
    ),
    Mistake(
        "07",
        "block-ffn-reads-ln1",
        "the second branch normalised by ln1",
        "block.py",
        "Block.forward",
        (("x = x + self.ffn(self.ln2(x))", "x = x + self.ffn(self.ln1(x))"),),
        "x",
        "Block and not post",
    ),
    Mistake(
        "08",
        "embeddings-scaled",
        "the token embeddings scaled by sqrt(d_model)",
        "gpt.py",
        "GPT.forward",
        (("x = self.tok_emb(idx)", "x = self.tok_emb(idx) * self.tok_emb.weight.shape[1] ** 0.5"),),
        "x",
        "forward_backward_parity and tanh and explicit",
    ),
    Mistake(
        "08",
        "final-norm-backward-residual",
        "a residual around the final LayerNorm's backward, where the forward has none",
        "gpt.py",
        "GPT.backward",
        (("dx = self.ln_f.backward(dx)", "dx = dx + self.ln_f.backward(dx)"),),
        "dx",
        "forward_backward_parity and tanh and explicit",
    ),
    Mistake(
        "09",
        "ce-backward-ignores-keep",
        "the ignored rows get a gradient too",
        "loss.py",
        "CrossEntropyLoss.backward",
        (("* keep[:, None] / max(n_kept, 1)", "/ max(n_kept, 1)"),),
        "dlogits",
        "CrossEntropy",
    ),
    Mistake(
        "09",
        "cosine-without-pi",
        "cos(decay_ratio), the pi left out",
        "optim.py",
        "cosine_lr",
        (("math.cos(math.pi * decay_ratio)", "math.cos(decay_ratio)"),),
        "coeff",
        "lr_schedules",
    ),
    Mistake(
        "09",
        "cross-entropy-target-columns",
        "the targets' logits picked as whole columns, shifted[:, t]: an (N, N) block",
        "loss.py",
        "CrossEntropyLoss.forward",
        (("shifted[np.arange(N), t_safe]", "shifted[:, t_safe]"),),
        "nll",
        "CrossEntropy",
    ),
    Mistake(
        "10",
        "top-k-drops-kth",
        "the k-th largest logit removed too (<= instead of <)",
        "sampling.py",
        "filter_logits",
        (("logits[logits < kth] = -np.inf", "logits[logits <= kth] = -np.inf"),),
        "logits",
        "filter_logits",
    ),
    Mistake(
        "11",
        "bpe-keeps-second",
        "ids[j] = new: the pair's second element kept",
        "tokenizer.py",
        "BPETokenizer._bpe",
        (("ids[j : j + 2] = [new]", "ids[j] = new"),),
        "ids",
        "bpe or encode",
    ),
    Mistake(
        "11",
        "merge-misses-the-last-pair",
        "a pair at the very end of the sequence never merged",
        "tokenizer.py",
        "merge",
        (("if i < n - 1 and", "if i < n - 2 and"),),
        "out",
        "merge",
    ),
    Mistake(
        "12",
        "online-softmax-alpha-inverted",
        "alpha = exp(m_new - m), the rescale inverted",
        "flash_attention.py",
        "flash_attention",
        (("alpha = np.exp(m - m_safe)", "alpha = np.exp(m_safe - m)"),),
        "alpha",
        "flash",
    ),
    Mistake(
        "13",
        "sinusoidal-sin-cos-swapped",
        "cos on the even columns, sin on the odd",
        "positional.py",
        "sinusoidal_table",
        (("pe[:, 0::2] = np.sin(angle)", "pe[:, 0::2] = np.cos(angle)"),),
        "pe",
        "sinusoidal",
    ),
    Mistake(
        "13",
        "rope-backward-same-angle",
        "the backward rotates by the same angle again, not by the opposite one",
        "rope.py",
        "RotaryEmbedding.backward",
        (("neg_sin = self._cos, -self._sin", "neg_sin = self._cos, self._sin"),),
        "neg_sin",
        "Rotary or rope",
    ),
    Mistake(
        "14",
        "silu-backward-sigmoid-derivative",
        "s (1 - s), the sigmoid's derivative",
        "activations.py",
        "SiLU.backward",
        (("return dout * s * (1 + x * (1 - s))", "return dout * s * (1 - s)"),),
        "return",
        "SiLU",
    ),
    Mistake(
        "14",
        "rmsnorm-variance",
        "the variance (LayerNorm's habit) instead of the mean square",
        "norm.py",
        "RMSNorm.forward",
        (("(x**2).mean(axis=-1, keepdims=True)", "x.var(axis=-1, keepdims=True)"),),
        "rrms",
        "RMSNorm",
    ),
    Mistake(
        "15",
        "pool-first-token",
        "the first token's vector as the sentence, not the mean",
        "encoder.py",
        "TransformerClassifier.forward",
        (("pooled = self.pool(x, token_mask)", "pooled = x[:, 0]"),),
        "pooled",
        "TransformerClassifier or classifier",
    ),
    Mistake(
        "15",
        "pool-backward-divides-again",
        "the gradient divided by T once more: the weights already hold 1/T",
        "encoder.py",
        "MeanPool.backward",
        (("dout[:, None, :]  #", "dout[:, None, :] / self._weights.shape[1]  #"),),
        "dx",
        "MeanPool or classifier",
    ),
    Mistake(
        "16",
        "cross-attention-no-memory-mask",
        "the memory's padding mask left out",
        "seq2seq.py",
        "DecoderBlock.forward",
        (("kv=memory, attn_mask=memory_mask)", "kv=memory)"),),
        "x",
        "Decoder or seq2seq",
    ),
    Mistake(
        "16",
        "decoder-backward-drops-residual",
        "the cross-attention's residual gradient dropped: dx replaced, not added to",
        "seq2seq.py",
        "DecoderBlock.backward",
        (("dx = dx + self.ln2.backward(dh)", "dx = self.ln2.backward(dh)"),),
        "dx",
        "Decoder or seq2seq",
    ),
    Mistake(
        "17",
        "key-table-conv1d-flag-inverted",
        "the Conv1D flag of the blocks' weights inverted",
        "pretrained.py",
        "gpt2_key_table",
        (('.{theirs}.weight", conv1d)', '.{theirs}.weight", not conv1d)'),),
        "table",
        "key_table or conv1d",
    ),
]


def mistake_lines(ref, mistake: Mistake, text: str) -> list[int]:
    """The lines (from 1) of the workspace file ``text`` that hold the mistake: the statement
    of its first edit's first line (a compound statement's header only)."""
    begin = region_of(ref, mistake).begin
    first = mistake.edits[0][1].splitlines()[0].strip()
    lines = text.splitlines()
    # the workspace's region starts where the reference's does (earlier regions unchanged)
    line = next(i + 1 for i in range(begin, len(lines)) if first in lines[i])
    spans = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.stmt) and node.lineno <= line <= node.end_lineno:
            body = getattr(node, "body", None)
            end = body[0].lineno - 1 if body and body[0].lineno > line else node.end_lineno
            if node.lineno <= line <= end:
                spans.append((end - node.lineno, node.lineno, end))
    _, start, end = min(spans)
    return list(range(start, end + 1))
