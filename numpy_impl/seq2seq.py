"""The encoder-decoder Transformer (Vaswani et al. 2017, sec. 3.1) and its cross-attention.

The encoder reads the source bidirectionally into a "memory" ``(B, S, C)``. Each decoder block
attends from the target positions (queries) to the memory (keys, values): the paper's
"encoder-decoder attention" (sec. 3.2.3), here :class:`~numpy_impl.attention.SelfAttention`
called with ``kv=memory``. Training is teacher-forced; decoding is greedy. Blocks are pre-norm
(``x + f(LN(x))``), not the paper's post-norm; the encoder's final LayerNorm gives the memory.
Masks (docs/masks.md): ``src_mask`` ``(B, S)``, ``tgt_mask`` ``(B, T)``, bool, True = real
token. The source mask hides source padding from the encoder and every cross-attention; the
target mask joins the causal mask in the decoder's self-attention.
"""

from __future__ import annotations

import numpy as np

from .attention import SelfAttention
from .dropout import Dropout
from .embedding import Embedding
from .encoder import Encoder, check_model_sizes, check_sequence_ids, init_transformer_weights
from .ffn import FeedForward
from .linear import Linear
from .masks import check_token_mask, key_padding_attn_mask
from .module import Module, ModuleList, no_grad
from .norm import LayerNorm
from .positional import SinusoidalPositionalEncoding


class DecoderBlock(Module):
    """Pre-norm decoder block of the encoder-decoder Transformer:

        x = x + self_attn(ln1(x), causal and target-padding mask)
        x = x + cross_attn(ln2(x), kv=memory, source-padding mask)
        x = x + ffn(ln3(x))

    Args:
        d_model, n_heads, d_ff, bias, dropout, gelu_approximate: as in
            :class:`~numpy_impl.encoder.Encoder`.
        dtype, rng: NumPy only.

    Shapes:
        forward: x ``(B, T, C)``, memory ``(B, S, C)``, self_mask (broadcastable to
        ``(B, H, T, T)``, combined with the causal mask) and memory_mask
        (broadcastable to ``(B, H, T, S)``) -> ``(B, T, C)``.
        backward: dout ``(B, T, C)`` -> ``(dx (B, T, C), dmemory (B, S, C))``.
    """

    def __init__(
        self,
        d_model,
        n_heads,
        d_ff=None,
        bias=True,
        dropout=0.0,
        gelu_approximate="none",
        *,
        dtype=np.float32,
        rng=None,
    ):
        self.ln1 = LayerNorm(d_model, bias=bias, dtype=dtype)
        self.self_attn = SelfAttention(
            d_model, n_heads, bias=bias, dropout=dropout, dtype=dtype, rng=rng
        )
        self.ln2 = LayerNorm(d_model, bias=bias, dtype=dtype)
        self.cross_attn = SelfAttention(
            d_model, n_heads, bias=bias, dropout=dropout, dtype=dtype, rng=rng
        )
        self.ln3 = LayerNorm(d_model, bias=bias, dtype=dtype)
        self.ffn = FeedForward(d_model, d_ff, bias, dropout, gelu_approximate, dtype=dtype, rng=rng)

    def forward(self, x, memory, self_mask=None, memory_mask=None) -> np.ndarray:
        ### BEGIN SOLUTION ch16
        ### TODO: the three residual sub-layers of the docstring: causal self-attention with
        ###   self_mask, cross-attention to kv=memory with memory_mask, the FFN
        x = x + self.self_attn(self.ln1(x), attn_mask=self_mask, is_causal=True)
        x = x + self.cross_attn(self.ln2(x), kv=memory, attn_mask=memory_mask)
        return x + self.ffn(self.ln3(x))
        ### END SOLUTION

    def backward(self, dout: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        ### BEGIN SOLUTION ch16
        ### TODO: the forward in reverse; the cross-attention's backward returns (dx, dmemory):
        ###   dx joins the residual stream, dmemory is returned
        dx = dout + self.ln3.backward(self.ffn.backward(dout))
        dh, dmemory = self.cross_attn.backward(dx)  # (B, T, C), (B, S, C)
        dx = dx + self.ln2.backward(dh)
        dx = dx + self.ln1.backward(self.self_attn.backward(dx))
        return dx, dmemory
        ### END SOLUTION


class Decoder(Module):
    """A stack of :class:`DecoderBlock` and the final LayerNorm.

    Every block reads the same memory, so its gradient is the sum of the blocks'.

    Shapes:
        forward: x ``(B, T, C)``, memory ``(B, S, C)``, self_mask, memory_mask -> ``(B, T, C)``.
        backward: dout -> ``(dx, dmemory)``.
    """

    def __init__(
        self,
        n_layers,
        d_model,
        n_heads,
        d_ff=None,
        bias=True,
        dropout=0.0,
        gelu_approximate="none",
        *,
        dtype=np.float32,
        rng=None,
    ):
        check_model_sizes(n_layers=n_layers, d_model=d_model, n_heads=n_heads)
        self.blocks = ModuleList(
            DecoderBlock(
                d_model, n_heads, d_ff, bias, dropout, gelu_approximate, dtype=dtype, rng=rng
            )
            for _ in range(n_layers)
        )
        self.ln_f = LayerNorm(d_model, bias=bias, dtype=dtype)

    def forward(self, x, memory, self_mask=None, memory_mask=None) -> np.ndarray:
        for block in self.blocks:
            x = block(x, memory, self_mask=self_mask, memory_mask=memory_mask)
        return self.ln_f(x)

    def backward(self, dout: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        dx = self.ln_f.backward(dout)
        dmemory = None
        for block in reversed(self.blocks):
            dx, dm = block.backward(dx)
            dmemory = dm if dmemory is None else dmemory + dm
        return dx, dmemory


class Seq2SeqTransformer(Module):
    """The encoder-decoder Transformer of Vaswani et al. 2017 (Figure 1), pre-norm.

        memory = encoder(src_drop(src_emb(src) + PE), src padding)
        logits = head(decoder(tgt_drop(tgt_emb(tgt) + PE), memory, masks))

    Teacher forcing: ``tgt`` is the target shifted right (BOS first); the logits at
    position t predict target token t. The sinusoid table ``pos_enc`` serves both
    sides. Initialisation as :class:`~numpy_impl.encoder.TransformerClassifier`
    (embeddings N(0, 1): the paper scales its embeddings by sqrt(d_model) for
    the same purpose, putting tokens on the sinusoids' scale), residual projections
    N(0, 0.02 / sqrt(2 (n_encoder_layers + n_decoder_layers))); the head has no bias.

    Args:
        src_vocab_size, tgt_vocab_size: the two vocabularies.
        block_size: longest source and longest target sequence.
        n_encoder_layers, n_decoder_layers, n_heads, d_model, d_ff, dropout, bias,
        gelu_approximate: the two stacks.
        seed, dtype: initial weights; parameter dtype.

    Shapes:
        forward: src ``(B, S)``, tgt ``(B, T)`` integer; src_mask ``(B, S)``,
        tgt_mask ``(B, T)`` bool (True = real token) or None -> logits
        ``(B, T, tgt_vocab_size)``. backward: dlogits -> None; fills every ``.grad``.

    Raises:
        ValueError: bad sizes; ids of the wrong shape, out of range or longer than
            ``block_size``; masks not matching their ids; src and tgt batch sizes differ.
        TypeError: non-integer ids; non-boolean masks.
    """

    def __init__(
        self,
        src_vocab_size,
        tgt_vocab_size,
        block_size=64,
        n_encoder_layers=2,
        n_decoder_layers=2,
        n_heads=4,
        d_model=128,
        d_ff=None,
        dropout=0.0,
        bias=True,
        gelu_approximate="none",
        *,
        seed=None,
        dtype=np.float32,
    ):
        check_model_sizes(
            src_vocab_size=src_vocab_size,
            tgt_vocab_size=tgt_vocab_size,
            block_size=block_size,
            n_encoder_layers=n_encoder_layers,
            n_decoder_layers=n_decoder_layers,
            d_model=d_model,
            n_heads=n_heads,
        )
        rng = np.random.default_rng(seed)
        self.src_vocab_size, self.tgt_vocab_size = src_vocab_size, tgt_vocab_size
        self.block_size = block_size
        self.src_emb = Embedding(src_vocab_size, d_model, dtype=dtype, rng=rng)
        self.tgt_emb = Embedding(tgt_vocab_size, d_model, dtype=dtype, rng=rng)
        self.pos_enc = SinusoidalPositionalEncoding(block_size, d_model, dtype=dtype)
        self.src_drop = Dropout(dropout)
        self.tgt_drop = Dropout(dropout)
        args = (d_model, n_heads, d_ff, bias, dropout, gelu_approximate)
        self.encoder = Encoder(n_encoder_layers, *args, dtype=dtype, rng=rng)
        self.decoder = Decoder(n_decoder_layers, *args, dtype=dtype, rng=rng)
        self.head = Linear(d_model, tgt_vocab_size, bias=False, dtype=dtype, rng=rng)
        init_transformer_weights(self, n_encoder_layers + n_decoder_layers, rng=rng)

    # -- the two halves ------------------------------------------------------------------
    @staticmethod
    def _padding_mask(mask, shape: tuple[int, int], name: str):
        """Validate a ``(B, T)`` padding mask; return its ``(B, 1, 1, T)`` attention form."""
        if mask is None:
            return None
        mask = np.asarray(mask)
        check_token_mask(mask, shape, name)
        return key_padding_attn_mask(mask)

    def encode(self, src: np.ndarray, src_mask=None) -> np.ndarray:
        """The memory: src ``(B, S)`` -> ``(B, S, C)``."""
        src = check_sequence_ids(src, self.src_vocab_size, self.block_size, "src")
        attn_mask = self._padding_mask(src_mask, src.shape, "src_mask")
        x = self.src_emb(src) + self.pos_enc(src.shape[1])  # (B, S, C)
        return self.encoder(self.src_drop(x), attn_mask=attn_mask)

    def decode(self, tgt: np.ndarray, memory: np.ndarray, src_mask=None, tgt_mask=None):
        """Logits ``(B, T, tgt_vocab_size)`` of the target prefix ``tgt`` ``(B, T)`` given
        the memory ``(B, S, C)`` of the source (whose padding is ``src_mask``)."""
        tgt = check_sequence_ids(tgt, self.tgt_vocab_size, self.block_size, "tgt")
        if memory.ndim != 3 or memory.shape[0] != tgt.shape[0]:
            raise ValueError(
                f"memory: expected shape (B={tgt.shape[0]}, S, d_model), got {memory.shape}"
            )
        memory_mask = self._padding_mask(src_mask, memory.shape[:2], "src_mask")  # (B, 1, 1, S)
        self_mask = self._padding_mask(tgt_mask, tgt.shape, "tgt_mask")  # (B, 1, 1, T), + causal
        y = self.tgt_emb(tgt) + self.pos_enc(tgt.shape[1])  # (B, T, C)
        y = self.decoder(self.tgt_drop(y), memory, self_mask, memory_mask)
        return self.head(y)  # (B, T, tgt_vocab_size)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None) -> np.ndarray:
        src, tgt = np.asarray(src), np.asarray(tgt)
        if src.ndim == 2 and tgt.ndim == 2 and src.shape[0] != tgt.shape[0]:
            raise ValueError(
                f"tgt: expected the batch size of src ({src.shape[0]}), got shape {tgt.shape}"
            )
        memory = self.encode(src, src_mask)
        return self.decode(tgt, memory, src_mask, tgt_mask)

    def backward(self, dlogits: np.ndarray) -> None:
        dy = self.head.backward(dlogits)  # (B, T, C)
        dy, dmemory = self.decoder.backward(dy)  # the memory fed every decoder block
        self.tgt_emb.backward(self.tgt_drop.backward(dy))
        dx = self.encoder.backward(dmemory)
        self.src_emb.backward(self.src_drop.backward(dx))

    @no_grad()  # as the twin's @torch.no_grad(): each layer keeps no backward cache
    def generate(self, src, max_new_tokens: int, bos_id: int, src_mask=None, eos_id=None):
        """Greedy decoding: from ``[BOS]``, append the argmax token ``max_new_tokens`` times.

        The source is encoded once; each step runs the decoder on the whole prefix
        (no key/value cache: the shapes stay those of training). Stops early once
        every row has produced ``eos_id`` (when given). Runs in eval mode.

        Returns:
            int64 ``(B, n)``, ``n <= max_new_tokens``: the generated ids, BOS excluded
            (a row may continue past its own EOS while others finish).

        Raises:
            ValueError: ``max_new_tokens`` outside ``[1, block_size]``, ``bos_id`` or
                ``eos_id`` outside the target vocabulary.
        """
        if not 1 <= max_new_tokens <= self.block_size:
            raise ValueError(
                f"max_new_tokens: must lie in [1, block_size={self.block_size}], "
                f"got {max_new_tokens}"
            )
        for name, value in (("bos_id", bos_id), ("eos_id", eos_id)):
            if value is not None and not 0 <= value < self.tgt_vocab_size:
                raise ValueError(
                    f"{name}: must lie in [0, tgt_vocab_size={self.tgt_vocab_size}), got {value}"
                )
        was_training = self.training
        self.eval()
        try:
            memory = self.encode(src, src_mask)  # (B, S, C), once
            B = memory.shape[0]
            ys = np.full((B, 1), bos_id, dtype=np.int64)  # (B, 1): BOS
            done = np.zeros(B, dtype=bool)
            for _ in range(max_new_tokens):
                ### BEGIN SOLUTION ch16
                ### TODO: decode the prefix ys against the memory (with src_mask), take the
                ###   argmax of the last position's logits (B,), append it to ys; mark rows
                ###   that produced eos_id in `done` and stop once all are
                logits = self.decode(ys, memory, src_mask)  # (B, t, V)
                nxt = logits[:, -1].argmax(axis=-1)  # (B,): the most likely next token
                ys = np.concatenate([ys, nxt[:, None]], axis=1)  # (B, t + 1)
                if eos_id is not None:
                    done |= nxt == eos_id
                    if done.all():
                        break
                ### END SOLUTION
        finally:
            self.train(was_training)
        return ys[:, 1:]
