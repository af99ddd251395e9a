"""Small real models for CPU benchmarks and the demo (no downloads: data is generated)."""

from __future__ import annotations

from typing import Any

from ..integrations._imports import require_torch


def make_cnn(width: int = 32, hidden: int = 1536, n_classes: int = 10, seed: int = 0) -> Any:
    """A small CNN for 3x32x32 inputs: about 3.4M parameters, ~25M MACs per image.

    Four conv layers (with batch-norm) and two fully connected layers; most
    bytes sit in the first fully connected layer, most compute in the convs,
    so gradients become ready over the whole backward pass as in real image
    models, at a size one CPU core trains at ~10 iterations/s (batch 16).
    """
    torch = require_torch()
    nn = torch.nn
    torch.manual_seed(seed)
    w = width

    def block(cin: int, cout: int) -> list[Any]:
        return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]

    return nn.Sequential(
        *block(3, w), nn.MaxPool2d(2),
        *block(w, 2 * w), nn.MaxPool2d(2),
        *block(2 * w, 4 * w), *block(4 * w, 4 * w), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(4 * w * 16, hidden), nn.ReLU(), nn.Linear(hidden, n_classes),
    )


def synthetic_batches(n: int, batch_size: int, rank: int = 0, n_classes: int = 10, seed: int = 0) -> list[tuple[Any, Any]]:
    """``n`` batches of random 3x32x32 images and labels, different per rank."""
    torch = require_torch()
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return [(torch.randn(batch_size, 3, 32, 32, generator=g), torch.randint(0, n_classes, (batch_size,), generator=g)) for _ in range(n)]


def n_parameters(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


#: Token vocabulary of :func:`make_transformer` (its embedding rows).
VOCAB = 32768


def make_transformer(vocab: int = VOCAB, dim: int = 128, n_layers: int = 2, n_heads: int = 4, n_classes: int = 10,
                     seed: int = 0) -> Any:
    """A small transformer encoder whose bytes sit in one large embedding table.

    ``vocab x dim`` embedding (4.2M parameters, 16 MiB of fp32 gradient at the
    defaults: the first layer, so it is both the largest tensor and the one
    ByteScheduler's priority sends first) under ``n_layers`` encoder layers of
    ~0.2M parameters each, mean-pooled into a classifier. Takes token ids of
    shape ``(batch, seq)``; the embedding's gradient is dense, as in a
    DDP-trained language model without sparse gradients.
    """
    torch = require_torch()
    nn = torch.nn
    torch.manual_seed(seed)

    class _Encoder(nn.Module):  # type: ignore[misc, name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(vocab, dim)
            layer = nn.TransformerEncoderLayer(dim, n_heads, dim_feedforward=4 * dim, dropout=0.0, batch_first=True)
            self.encoder = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)
            self.head = nn.Linear(dim, n_classes)

        def forward(self, tokens: Any) -> Any:
            return self.head(self.encoder(self.embed(tokens)).mean(dim=1))

    return _Encoder()


def make_mlp(d_in: int = 3072, hidden: int = 2048, n_hidden: int = 2, n_classes: int = 10, seed: int = 0) -> Any:
    """An MLP of a few huge Linear layers: few tensors, each of many MiB, little compute per byte.

    At the defaults, ``3072 -> 2048 -> 2048 -> 10``: 10.5M parameters in two
    weight matrices of 24 and 16 MiB (fp32), so partitioning decides how much
    of each can overlap with the backward pass. Takes 3x32x32 images (flattened).
    """
    torch = require_torch()
    nn = torch.nn
    torch.manual_seed(seed)
    layers: list[Any] = [nn.Flatten()]
    width = d_in
    for _ in range(n_hidden):
        layers += [nn.Linear(width, hidden), nn.ReLU()]
        width = hidden
    return nn.Sequential(*layers, nn.Linear(width, n_classes))


#: Models ``allreduce_ranks`` (spec field ``model``) and the benchmark suite can train.
MODELS = ("cnn", "transformer", "mlp")

#: Sequence length of the transformer's synthetic token batches.
SEQ_LEN = 64


def make_model(name: str, seed: int = 0, *, width: int = 32, hidden: int = 1536) -> Any:
    """One of :data:`MODELS` at its default size (the CNN sized by ``width`` and ``hidden``, as :func:`make_cnn`)."""
    if name not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, but got model={name!r}.")
    if name == "transformer":
        return make_transformer(seed=seed)
    return make_mlp(seed=seed) if name == "mlp" else make_cnn(width=width, hidden=hidden, seed=seed)


def model_batches(name: str, n: int, batch_size: int, rank: int = 0, seed: int = 0) -> list[tuple[Any, Any]]:
    """``n`` synthetic batches that :func:`make_model` ``(name)`` takes, different per rank."""
    if name != "transformer":
        return synthetic_batches(n, batch_size, rank, seed=seed)
    torch = require_torch()
    g = torch.Generator().manual_seed(seed * 1000 + rank)
    return [(torch.randint(0, VOCAB, (batch_size, SEQ_LEN), generator=g), torch.randint(0, 10, (batch_size,), generator=g))
            for _ in range(n)]
