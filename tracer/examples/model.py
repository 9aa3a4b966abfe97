"""A small decoder-only transformer language model and a learnable synthetic corpus."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass(frozen=True)
class ModelConfig:
    """Shape of the language model."""

    vocab_size: int = 256
    """Tokens in the vocabulary."""
    hidden: int = 64
    """Width of the residual stream."""
    layers: int = 2
    """Transformer blocks (one FSDP unit each with per-block wrapping)."""
    heads: int = 4
    """Attention heads; must divide ``hidden``."""
    seq_len: int = 64
    """Tokens per sample."""
    mlp_ratio: int = 4
    """MLP width over ``hidden``."""

    def __post_init__(self) -> None:
        for name in ("vocab_size", "hidden", "layers", "heads", "seq_len", "mlp_ratio"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        if self.hidden % self.heads:
            raise ValueError("heads must divide hidden")


MODEL_SIZES = {
    "tiny": ModelConfig(vocab_size=256, hidden=64, layers=2, heads=4, seq_len=64),
    "small": ModelConfig(vocab_size=1024, hidden=128, layers=4, heads=4, seq_len=128),
    "medium": ModelConfig(vocab_size=4096, hidden=256, layers=6, heads=8, seq_len=256),
}


class Block(nn.Module):
    """Pre-norm attention and MLP with residuals."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.heads = cfg.heads
        self.attn_norm = nn.LayerNorm(cfg.hidden)
        self.qkv = nn.Linear(cfg.hidden, 3 * cfg.hidden)
        self.proj = nn.Linear(cfg.hidden, cfg.hidden)
        self.mlp_norm = nn.LayerNorm(cfg.hidden)
        self.fc1 = nn.Linear(cfg.hidden, cfg.mlp_ratio * cfg.hidden)
        self.fc2 = nn.Linear(cfg.mlp_ratio * cfg.hidden, cfg.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).split(hidden, dim=2)
        q, k, v = (t.view(batch, seq, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(batch, seq, hidden))
        return x + self.fc2(F.gelu(self.fc1(self.mlp_norm(x))))


class TinyLM(nn.Module):
    """Token and position embeddings, ``layers`` blocks, final norm, untied output head."""

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.tok_emb = nn.Embedding(cfg.vocab_size, cfg.hidden)
        self.pos_emb = nn.Embedding(cfg.seq_len, cfg.hidden)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.layers))
        self.norm = nn.LayerNorm(cfg.hidden)
        self.head = nn.Linear(cfg.hidden, cfg.vocab_size, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        positions = torch.arange(tokens.shape[1], device=tokens.device)
        x = self.tok_emb(tokens) + self.pos_emb(positions)
        for block in self.blocks:
            x = block(x)
        return self.head(self.norm(x))


def lm_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross entropy."""
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten())


def synthetic_batches(
    cfg: ModelConfig, micro_batch_size: int, count: int, seed: int, rank: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``count`` (tokens, targets) pairs, each ``micro_batch_size x seq_len``, on the CPU.

    The sequences follow a fixed random successor table with 10% noise:
    learnable (the loss falls), the same table on every rank, different
    samples per (seed, rank) as a data-parallel sampler would give. Made up
    front so that no data-making ops land in the profiled steps.
    """
    noise_prob = 0.1
    successor = torch.randint(cfg.vocab_size, (cfg.vocab_size,), generator=torch.Generator().manual_seed(seed))
    gen = torch.Generator().manual_seed(seed * 1_000_003 + rank + 1)
    shape = (count * micro_batch_size, cfg.seq_len + 1)
    noise = torch.randint(cfg.vocab_size, shape, generator=gen)
    keep = torch.rand(shape, generator=gen) >= noise_prob
    seq = noise.clone()
    for t in range(1, shape[1]):
        seq[:, t] = torch.where(keep[:, t], successor[seq[:, t - 1]], noise[:, t])
    return [(chunk[:, :-1].contiguous(), chunk[:, 1:].contiguous()) for chunk in seq.split(micro_batch_size)]
