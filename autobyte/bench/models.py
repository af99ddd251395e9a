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
