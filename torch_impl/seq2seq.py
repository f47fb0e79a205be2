"""The encoder-decoder Transformer (Vaswani et al. 2017, sec. 3.1) and its cross-attention,
twin of ``numpy_impl/seq2seq.py``.

The encoder turns the source into a memory ``(B, S, C)``; each decoder block
runs causal self-attention over the target so far, then cross-attention from
its positions to the memory, then the FFN. Pre-norm throughout. Training is
teacher-forced; :meth:`Seq2SeqTransformer.generate` decodes greedily.

Masks (docs/masks.md): ``src_mask`` ``(B, S)`` and ``tgt_mask`` ``(B, T)`` are
bool padding masks, True for a real token.
"""

from __future__ import annotations

import torch
from torch import nn

from .attention import SelfAttention
from .dropout import Dropout
from .embedding import Embedding
from .encoder import Encoder, check_model_sizes, check_sequence_ids, init_transformer_weights
from .ffn import FeedForward
from .linear import Linear
from .masks import check_token_mask, key_padding_attn_mask
from .norm import LayerNorm
from .positional import SinusoidalPositionalEncoding


class DecoderBlock(nn.Module):
    """``x += self_attn(ln1(x), causal + tgt padding)``; ``x += cross_attn(ln2(x), memory)``;
    ``x += ffn(ln3(x))``.

    Shapes: x ``(B, T, C)``, memory ``(B, S, C)``, self_mask, memory_mask -> ``(B, T, C)``.
    """

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        d_ff: int | None = None,
        bias: bool = True,
        dropout: float = 0.0,
        gelu_approximate: str = "none",
        *,
        attn_impl: str = "sdpa",
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        kw = {"attn_impl": attn_impl, "dtype": dtype}
        self.ln1 = LayerNorm(d_model, bias=bias, dtype=dtype)
        self.self_attn = SelfAttention(d_model, n_heads, bias=bias, dropout=dropout, **kw)
        self.ln2 = LayerNorm(d_model, bias=bias, dtype=dtype)
        self.cross_attn = SelfAttention(d_model, n_heads, bias=bias, dropout=dropout, **kw)
        self.ln3 = LayerNorm(d_model, bias=bias, dtype=dtype)
        self.ffn = FeedForward(d_model, d_ff, bias, dropout, gelu_approximate, dtype=dtype)

    def forward(self, x, memory, self_mask=None, memory_mask=None) -> torch.Tensor:
        x = x + self.self_attn(self.ln1(x), attn_mask=self_mask, is_causal=True)
        x = x + self.cross_attn(self.ln2(x), kv=memory, attn_mask=memory_mask)
        return x + self.ffn(self.ln3(x))


class Decoder(nn.Module):
    """A stack of :class:`DecoderBlock` and the final LayerNorm."""

    def __init__(
        self,
        n_layers: int,
        d_model: int,
        n_heads: int,
        d_ff: int | None = None,
        bias: bool = True,
        dropout: float = 0.0,
        gelu_approximate: str = "none",
        *,
        attn_impl: str = "sdpa",
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        check_model_sizes(n_layers=n_layers, d_model=d_model, n_heads=n_heads)
        self.blocks = nn.ModuleList(
            DecoderBlock(
                d_model,
                n_heads,
                d_ff,
                bias,
                dropout,
                gelu_approximate,
                attn_impl=attn_impl,
                dtype=dtype,
            )
            for _ in range(n_layers)
        )
        self.ln_f = LayerNorm(d_model, bias=bias, dtype=dtype)

    def forward(self, x, memory, self_mask=None, memory_mask=None) -> torch.Tensor:
        for block in self.blocks:
            x = block(x, memory, self_mask=self_mask, memory_mask=memory_mask)
        return self.ln_f(x)


class Seq2SeqTransformer(nn.Module):
    """The encoder-decoder Transformer of Vaswani et al. 2017 (Figure 1), pre-norm; twin of
    the NumPy one (same arguments, plus ``attn_impl``; seeded by ``torch.manual_seed``).

    Shapes:
        src ``(B, S)``, tgt ``(B, T)`` integer; src_mask ``(B, S)``, tgt_mask ``(B, T)``
        bool or None -> logits ``(B, T, tgt_vocab_size)``.

    Raises:
        ValueError / TypeError: as the NumPy twin.
    """

    def __init__(
        self,
        src_vocab_size: int,
        tgt_vocab_size: int,
        block_size: int = 64,
        n_encoder_layers: int = 2,
        n_decoder_layers: int = 2,
        n_heads: int = 4,
        d_model: int = 128,
        d_ff: int | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        gelu_approximate: str = "none",
        *,
        attn_impl: str = "sdpa",
        dtype: torch.dtype | None = None,
    ):
        super().__init__()
        check_model_sizes(
            src_vocab_size=src_vocab_size,
            tgt_vocab_size=tgt_vocab_size,
            block_size=block_size,
            n_encoder_layers=n_encoder_layers,
            n_decoder_layers=n_decoder_layers,
            d_model=d_model,
            n_heads=n_heads,
        )
        self.src_vocab_size, self.tgt_vocab_size = src_vocab_size, tgt_vocab_size
        self.block_size = block_size
        self.src_emb = Embedding(src_vocab_size, d_model, dtype=dtype)
        self.tgt_emb = Embedding(tgt_vocab_size, d_model, dtype=dtype)
        self.pos_enc = SinusoidalPositionalEncoding(block_size, d_model, dtype=dtype)
        self.src_drop = Dropout(dropout)
        self.tgt_drop = Dropout(dropout)
        args = (d_model, n_heads, d_ff, bias, dropout, gelu_approximate)
        self.encoder = Encoder(n_encoder_layers, *args, attn_impl=attn_impl, dtype=dtype)
        self.decoder = Decoder(n_decoder_layers, *args, attn_impl=attn_impl, dtype=dtype)
        self.head = Linear(d_model, tgt_vocab_size, bias=False, dtype=dtype)
        init_transformer_weights(self, n_encoder_layers + n_decoder_layers)

    @staticmethod
    def _padding_mask(mask, shape, name: str):
        if mask is None:
            return None
        check_token_mask(mask, tuple(shape), name)
        return key_padding_attn_mask(mask)  # (B, 1, 1, T)

    def encode(self, src: torch.Tensor, src_mask: torch.Tensor | None = None) -> torch.Tensor:
        """The memory: src ``(B, S)`` -> ``(B, S, C)``."""
        src = check_sequence_ids(src, self.src_vocab_size, self.block_size, "src")
        attn_mask = self._padding_mask(src_mask, src.shape, "src_mask")
        x = self.src_emb(src) + self.pos_enc(src.shape[1])
        return self.encoder(self.src_drop(x), attn_mask=attn_mask)

    def decode(self, tgt, memory, src_mask=None, tgt_mask=None) -> torch.Tensor:
        """Logits ``(B, T, tgt_vocab_size)`` of the prefix ``tgt`` given the memory."""
        tgt = check_sequence_ids(tgt, self.tgt_vocab_size, self.block_size, "tgt")
        if memory.dim() != 3 or memory.shape[0] != tgt.shape[0]:
            raise ValueError(
                f"memory: expected shape (B={tgt.shape[0]}, S, d_model), got {tuple(memory.shape)}"
            )
        memory_mask = self._padding_mask(src_mask, memory.shape[:2], "src_mask")
        self_mask = self._padding_mask(tgt_mask, tgt.shape, "tgt_mask")
        y = self.tgt_emb(tgt) + self.pos_enc(tgt.shape[1])
        y = self.decoder(self.tgt_drop(y), memory, self_mask, memory_mask)
        return self.head(y)

    def forward(self, src, tgt, src_mask=None, tgt_mask=None) -> torch.Tensor:
        if src.dim() == 2 and tgt.dim() == 2 and src.shape[0] != tgt.shape[0]:
            raise ValueError(
                f"tgt: expected the batch size of src ({src.shape[0]}), "
                f"got shape {tuple(tgt.shape)}"
            )
        memory = self.encode(src, src_mask)
        return self.decode(tgt, memory, src_mask, tgt_mask)

    @torch.no_grad()
    def generate(
        self,
        src: torch.Tensor,
        max_new_tokens: int,
        bos_id: int,
        src_mask: torch.Tensor | None = None,
        eos_id: int | None = None,
    ) -> torch.Tensor:
        """Greedy decoding, as the NumPy twin: ``(B, n)`` long, ``n <= max_new_tokens``,
        BOS excluded; stops once every row has produced ``eos_id``. Runs in eval mode.

        Raises:
            ValueError: ``max_new_tokens`` outside ``[1, block_size]``; ``bos_id`` or
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
            memory = self.encode(src, src_mask)
            B = memory.shape[0]
            ys = torch.full((B, 1), bos_id, dtype=torch.long, device=memory.device)
            done = torch.zeros(B, dtype=torch.bool, device=memory.device)
            for _ in range(max_new_tokens):
                logits = self.decode(ys, memory, src_mask)  # (B, t, V)
                nxt = logits[:, -1].argmax(dim=-1)  # (B,)
                ys = torch.cat([ys, nxt[:, None]], dim=1)
                if eos_id is not None:
                    done |= nxt == eos_id
                    if bool(done.all()):
                        break
        finally:
            self.train(was_training)
        return ys[:, 1:]
