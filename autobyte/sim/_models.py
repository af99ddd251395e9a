"""Layer-wise model profiles: gradient bytes and compute time per layer.

Tensor sizes come from the real architecture definitions, written out below
layer by layer (no download, no framework). Compute times come from a
roofline model of a named device (default: NVIDIA V100, as in the paper's
testbed): ``time = max(FLOPs / (peak * efficiency), bytes / (HBM * efficiency))
+ launch overhead``, backward = 2x forward. Every constant is named here and
in ``docs/simulator.md`` with its source.

A *layer* is a module that owns parameters (a convolution or linear layer,
with the normalisation layer that directly follows or precedes it folded in),
listed from the input (layer 0) to the output. Its gradient is one tensor for
the scheduler.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

#: Bytes per parameter and activation element (FP32 training, as the paper's testbed).
FP32_BYTES = 4


@dataclass(frozen=True)
class Device:
    """A compute device for the roofline model.

    Args:
        name: label.
        peak_flops: peak FP32 throughput, FLOP/s.
        mem_Bps: peak memory bandwidth, bytes/s.
        compute_efficiency: fraction of ``peak_flops`` a training kernel reaches.
        memory_efficiency: fraction of ``mem_Bps`` a memory-bound kernel reaches.
        launch_s: fixed cost per layer and pass (kernel launches, framework dispatch).
        backward_factor: backward time / forward time (grad of input + grad of weights).
    """

    name: str
    peak_flops: float
    mem_Bps: float
    compute_efficiency: float
    memory_efficiency: float
    launch_s: float
    backward_factor: float = 2.0


#: NVIDIA Tesla V100 SXM2 16 GB. Peak FP32 15.7 TFLOP/s and HBM2 900 GB/s are
#: NVIDIA's V100 datasheet figures. compute_efficiency 0.6 is calibrated so
#: that ResNet-50 (v1.5) trains at ~370 img/s at batch 64, matching the 367
#: img/s NVIDIA publishes for one V100 16GB in FP32 (DeepLearningExamples,
#: PyTorch ResNet50 v1.5 README, "Training performance: NVIDIA DGX-1 16GB").
#: memory_efficiency 0.7 is a typical achieved fraction for element-wise
#: kernels; launch_s 10 us is a typical per-layer PyTorch dispatch cost.
V100 = Device("V100", peak_flops=15.7e12, mem_Bps=900e9, compute_efficiency=0.6, memory_efficiency=0.7, launch_s=10e-6)


@dataclass(frozen=True)
class ModelProfile:
    """Per-layer gradient sizes and compute times of one model on one device.

    Args:
        name: model name.
        layer_bytes: ``(l,)`` gradient bytes per layer, layer 0 nearest the input.
        forward_s: ``(l,)`` forward time per layer for one batch, seconds.
        backward_s: ``(l,)`` backward time per layer for one batch, seconds.
        batch_size: samples per worker per iteration.
        device: the device the times refer to.
        layer_names: optional names, one per layer.

    Raises:
        ValueError: empty model, shapes that disagree, non-positive bytes,
            negative / NaN / inf times, or a non-positive batch size.
    """

    name: str
    layer_bytes: np.ndarray
    forward_s: np.ndarray
    backward_s: np.ndarray
    batch_size: int
    device: str = "V100"
    layer_names: tuple[str, ...] = ()
    _key: str = field(init=False, repr=False, compare=False, default="")

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty string, but got name={self.name!r}.")
        lb = np.asarray(self.layer_bytes)
        if lb.ndim != 1 or lb.size == 0:
            raise ValueError(
                f"layer_bytes must be a non-empty 1-D sequence (a model with at least one layer with parameters), "
                f"but got shape {lb.shape}."
            )
        if not np.all(np.isfinite(lb.astype(np.float64))) or np.any(lb <= 0) or np.any(lb != np.round(lb)):
            raise ValueError(f"layer_bytes must hold positive integers, but got min {lb.min()!r}.")
        lb = lb.astype(np.int64)
        object.__setattr__(self, "layer_bytes", lb)
        for nm in ("forward_s", "backward_s"):
            arr = np.asarray(getattr(self, nm), dtype=np.float64)
            if arr.shape != lb.shape:
                raise ValueError(f"{nm} must have shape {lb.shape} (one time per layer), but got shape {arr.shape}.")
            if not np.all(np.isfinite(arr)) or np.any(arr < 0):
                raise ValueError(f"{nm} must hold finite non-negative seconds, but got {arr!r}.")
            arr.setflags(write=False)
            object.__setattr__(self, nm, arr)
        lb.setflags(write=False)
        if isinstance(self.batch_size, bool) or not isinstance(self.batch_size, (int, np.integer)) or self.batch_size <= 0:
            raise ValueError(f"batch_size must be a positive integer, but got batch_size={self.batch_size!r}.")
        object.__setattr__(self, "batch_size", int(self.batch_size))
        names = tuple(self.layer_names)
        if names and len(names) != lb.size:
            raise ValueError(f"layer_names must have {lb.size} entries (one per layer), but got {len(names)}.")
        object.__setattr__(self, "layer_names", names)
        h = hashlib.sha1(lb.tobytes()).hexdigest()[:16]
        object.__setattr__(self, "_key", f"{self.name}:{lb.size}:{h}")

    @property
    def n_layers(self) -> int:
        return int(self.layer_bytes.size)

    @property
    def total_bytes(self) -> int:
        return int(self.layer_bytes.sum())

    @property
    def n_params(self) -> int:
        """Parameters, assuming FP32 gradients."""
        return self.total_bytes // FP32_BYTES

    @property
    def compute_s(self) -> float:
        """Forward + backward time of one iteration (no communication)."""
        return float(self.forward_s.sum() + self.backward_s.sum())

    def with_batch_size(self, batch_size: int) -> "ModelProfile":
        """The same model at another batch size (compute scales linearly; the
        per-layer launch cost does not)."""
        if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or batch_size <= 0:
            raise ValueError(f"batch_size must be a positive integer, but got batch_size={batch_size!r}.")
        r = batch_size / self.batch_size
        return ModelProfile(self.name, self.layer_bytes, self.forward_s * r, self.backward_s * r, int(batch_size), self.device, self.layer_names)

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "layer_bytes": [int(x) for x in self.layer_bytes],
            "forward_s": [float(x) for x in self.forward_s],
            "backward_s": [float(x) for x in self.backward_s],
            "batch_size": self.batch_size,
            "device": self.device,
            "layer_names": list(self.layer_names),
        }

    @classmethod
    def from_dict(cls, d: dict[str, object]) -> "ModelProfile":
        return cls(
            name=str(d["name"]),
            layer_bytes=np.asarray(d["layer_bytes"]),
            forward_s=np.asarray(d["forward_s"], dtype=np.float64),
            backward_s=np.asarray(d["backward_s"], dtype=np.float64),
            batch_size=int(d["batch_size"]),  # type: ignore[call-overload]
            device=str(d.get("device", "")),
            layer_names=tuple(d.get("layer_names", ()) or ()),  # type: ignore[arg-type]
        )


# ---------------------------------------------------------------- builders
@dataclass
class _Layer:
    name: str
    params: int
    flops: float  # forward FLOPs per sample
    mem: float  # forward activation bytes moved per sample (weights are read once per batch)


class _Net:
    """Tracks the activation shape while layers are appended."""

    def __init__(self, c: int, h: int, w: int) -> None:
        self.c, self.h, self.w = c, h, w
        self.layers: list[_Layer] = []

    def conv(self, name: str, cout: int, k: int, stride: int = 1, pad: int | None = None, bias: bool = False,
             bn: bool = True, cin: int | None = None, h: int | None = None, w: int | None = None,
             set_shape: bool = True) -> None:
        cin = self.c if cin is None else cin
        hi = self.h if h is None else h
        wi = self.w if w is None else w
        pad = k // 2 if pad is None else pad
        ho = (hi + 2 * pad - k) // stride + 1
        wo = (wi + 2 * pad - k) // stride + 1
        params = k * k * cin * cout + (cout if bias else 0) + (2 * cout if bn else 0)
        flops = 2.0 * k * k * cin * cout * ho * wo
        # conv reads input, writes output; BN + ReLU read and write the output again.
        mem = FP32_BYTES * (cin * hi * wi + cout * ho * wo * (3 if bn else 2))
        self.layers.append(_Layer(name, params, flops, mem))
        if set_shape:
            self.c, self.h, self.w = cout, ho, wo

    def pool(self, k: int, stride: int, pad: int = 0) -> None:
        self.h = (self.h + 2 * pad - k) // stride + 1
        self.w = (self.w + 2 * pad - k) // stride + 1

    def linear(self, name: str, fin: int, fout: int, tokens: int = 1, bias: bool = True, extra_params: int = 0) -> None:
        params = fin * fout + (fout if bias else 0) + extra_params
        flops = 2.0 * fin * fout * tokens
        mem = FP32_BYTES * tokens * (fin + 2 * fout)
        self.layers.append(_Layer(name, params, flops, mem))


def _resnet(blocks: Sequence[int]) -> list[_Layer]:
    """torchvision ResNet-50/101/152 (bottleneck, v1.5: stride on the 3x3), 224x224 input."""
    net = _Net(3, 224, 224)
    net.conv("conv1", 64, 7, stride=2, pad=3)
    net.pool(3, 2, 1)
    cin = 64
    for stage, (n, width) in enumerate(zip(blocks, (64, 128, 256, 512))):
        for b in range(n):
            stride = 2 if (b == 0 and stage > 0) else 1
            h, w = net.h, net.w
            pre = f"layer{stage + 1}.{b}"
            net.conv(f"{pre}.conv1", width, 1, cin=cin)
            net.conv(f"{pre}.conv2", width, 3, stride=stride)
            net.conv(f"{pre}.conv3", width * 4, 1)
            if b == 0:
                net.conv(f"{pre}.downsample", width * 4, 1, stride=stride, cin=cin, h=h, w=w, set_shape=False)
            cin = width * 4
    net.linear("fc", 2048, 1000)
    return net.layers


def _vgg(cfg: Sequence[int | str]) -> list[_Layer]:
    """torchvision VGG (no batch norm), 224x224 input, classifier 4096-4096-1000."""
    net = _Net(3, 224, 224)
    i = 0
    for v in cfg:
        if v == "M":
            net.pool(2, 2)
        else:
            net.conv(f"features.{i}", int(v), 3, pad=1, bias=True, bn=False)
            i += 1
    net.linear("classifier.0", 512 * 7 * 7, 4096)
    net.linear("classifier.3", 4096, 4096)
    net.linear("classifier.6", 4096, 1000)
    return net.layers


def _alexnet() -> list[_Layer]:
    """torchvision AlexNet (61.1M parameters), 224x224 input."""
    net = _Net(3, 224, 224)
    net.conv("features.0", 64, 11, stride=4, pad=2, bias=True, bn=False)
    net.pool(3, 2)
    net.conv("features.3", 192, 5, pad=2, bias=True, bn=False)
    net.pool(3, 2)
    net.conv("features.6", 384, 3, pad=1, bias=True, bn=False)
    net.conv("features.8", 256, 3, pad=1, bias=True, bn=False)
    net.conv("features.10", 256, 3, pad=1, bias=True, bn=False)
    net.linear("classifier.1", 256 * 6 * 6, 4096)
    net.linear("classifier.4", 4096, 4096)
    net.linear("classifier.6", 4096, 1000)
    return net.layers


def _densenet(blocks: Sequence[int], growth: int = 32, init: int = 64, bn_size: int = 4) -> list[_Layer]:
    """torchvision DenseNet-121/169 (pre-activation: each conv carries the BN before it)."""
    net = _Net(3, 224, 224)
    net.conv("features.conv0", init, 7, stride=2, pad=3)  # + norm0
    net.pool(3, 2, 1)
    c = init
    for bi, n in enumerate(blocks):
        for li in range(n):
            pre = f"denseblock{bi + 1}.denselayer{li + 1}"
            # norm1 (BN over c inputs) + conv1 1x1 c -> bn_size*growth
            net.conv(f"{pre}.conv1", bn_size * growth, 1, cin=c, bn=False, set_shape=False)
            net.layers[-1].params += 2 * c
            # norm2 + conv2 3x3 -> growth
            net.conv(f"{pre}.conv2", growth, 3, cin=bn_size * growth, bn=False, set_shape=False)
            net.layers[-1].params += 2 * bn_size * growth
            c += growth
        if bi < len(blocks) - 1:
            net.conv(f"transition{bi + 1}.conv", c // 2, 1, cin=c, bn=False)
            net.layers[-1].params += 2 * c
            c //= 2
            net.pool(2, 2)
    net.linear("classifier", c, 1000, extra_params=2 * c)  # + norm5
    return net.layers


def _bert(n_layers: int, d: int, heads: int, ff: int, seq: int = 128, vocab: int = 30522, max_pos: int = 512) -> list[_Layer]:
    """BERT encoder (Devlin et al.; HuggingFace ``BertModel`` layout) + pooler, sequence length ``seq``."""
    del heads  # FLOPs of attention do not depend on the head count
    layers = []
    emb_params = vocab * d + max_pos * d + 2 * d + 2 * d  # word, position, token type, LayerNorm
    layers.append(_Layer("embeddings", emb_params, 4.0 * seq * d, FP32_BYTES * (3 * seq * d)))
    net = _Net(0, 0, 0)
    for i in range(n_layers):
        pre = f"encoder.layer.{i}"
        for proj in ("query", "key", "value"):
            net.linear(f"{pre}.attention.{proj}", d, d, tokens=seq)
        # attention scores and weighted sum: 2 * (2 * seq * seq * d) FLOPs, folded into the output projection
        net.linear(f"{pre}.attention.output", d, d, tokens=seq, extra_params=2 * d)
        net.layers[-1].flops += 4.0 * seq * seq * d
        net.layers[-1].mem += FP32_BYTES * 3 * seq * seq * 12  # softmax over heads x seq x seq (12 heads)
        net.linear(f"{pre}.intermediate", d, ff, tokens=seq)
        net.linear(f"{pre}.output", ff, d, tokens=seq, extra_params=2 * d)
    layers.extend(net.layers)
    layers.append(_Layer("pooler+classifier", d * d + d + 2 * d + 2, 2.0 * d * d, FP32_BYTES * 3 * d))
    return layers


def _profile(name: str, layers: list[_Layer], batch_size: int, device: Device = V100) -> ModelProfile:
    flops = np.array([l.flops for l in layers]) * batch_size
    mem = np.array([l.mem for l in layers]) * batch_size + np.array([l.params for l in layers]) * FP32_BYTES
    t_c = flops / (device.peak_flops * device.compute_efficiency)
    t_m = mem / (device.mem_Bps * device.memory_efficiency)
    fwd = np.maximum(t_c, t_m) + device.launch_s
    bwd = device.backward_factor * fwd
    return ModelProfile(
        name=name,
        layer_bytes=np.array([l.params * FP32_BYTES for l in layers], dtype=np.int64),
        forward_s=fwd,
        backward_s=bwd,
        batch_size=batch_size,
        device=device.name,
        layer_names=tuple(l.name for l in layers),
    )


_VGG16: list[int | str] = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]
_VGG19: list[int | str] = [64, 64, "M", 128, 128, "M", 256, 256, 256, 256, "M", 512, 512, 512, 512, "M", 512, 512, 512, 512, "M"]

#: name -> (builder, per-worker batch size). Batch sizes are common per-GPU
#: choices for FP32 training on a 16 GB V100 (the paper does not state its own).
_ZOO: dict[str, tuple[Callable[[], list[_Layer]], int]] = {
    "alexnet": (_alexnet, 128),
    "bert-base": (lambda: _bert(12, 768, 12, 3072), 32),
    "bert-large": (lambda: _bert(24, 1024, 16, 4096), 8),
    "densenet121": (lambda: _densenet((6, 12, 24, 16)), 32),
    "densenet169": (lambda: _densenet((6, 12, 32, 32)), 32),
    "resnet50": (lambda: _resnet((3, 4, 6, 3)), 64),
    "resnet101": (lambda: _resnet((3, 4, 23, 3)), 64),
    "resnet152": (lambda: _resnet((3, 8, 36, 3)), 32),
    "vgg16": (lambda: _vgg(_VGG16), 32),
    "vgg19": (lambda: _vgg(_VGG19), 32),
}

#: Names accepted by :func:`get_model`, sorted.
MODELS: tuple[str, ...] = tuple(sorted(_ZOO))

_CACHE: dict[tuple[str, int | None], ModelProfile] = {}


def get_model(name: str, *, batch_size: int | None = None) -> ModelProfile:
    """The zoo profile of ``name`` on a V100 (see :data:`MODELS`).

    Args:
        name: one of :data:`MODELS` (case-insensitive; ``_`` and ``-`` alike).
        batch_size: per-worker batch size; default: the zoo's choice.

    Raises:
        ValueError: unknown model name or bad batch size.
    """
    if not isinstance(name, str):
        raise ValueError(f"name must be one of {MODELS}, but got name={name!r}.")
    key = name.strip().lower().replace("_", "-")
    if key == "bert":
        key = "bert-base"
    if key not in _ZOO:
        raise ValueError(f"name must be one of {MODELS}, but got name={name!r}.")
    ck = (key, batch_size)
    if ck not in _CACHE:
        builder, bs = _ZOO[key]
        prof = _profile(key, builder(), bs)
        if batch_size is not None:
            prof = prof.with_batch_size(batch_size)
        _CACHE[ck] = prof
    return _CACHE[ck]


def _throughput(prof: ModelProfile) -> float:
    """Single-device samples/s with no communication (for calibration checks)."""
    return prof.batch_size / prof.compute_s if prof.compute_s > 0 else math.inf
