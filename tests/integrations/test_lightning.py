"""AutoByteCallback in real Lightning Trainers: 2 CPU processes on gloo, and single-process checks."""

from __future__ import annotations

import csv
import json
import logging
import os
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch")

from autobyte.testing import run_ranks  # noqa: E402
from autobyte.core import KiB  # noqa: E402
from autobyte.integrations import lightning as ab_lightning  # noqa: E402
from autobyte.integrations.lightning import AutoByteCallback  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(__file__), "scripts", "lightning_train.py")


@pytest.fixture(scope="module")
def two_ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("lightning")
    res = run_ranks([SCRIPT, str(out)], 2, timeout_s=400)
    for r in res:
        assert r.returncode == 0, f"rank {r.rank}:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    return out, [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)], res


def test_loss_curve_matches_plain_ddp(two_ranks):
    _, ranks, _ = two_ranks
    for d in ranks:
        assert len(d["ddp_losses"]) == 64
        # tuning off (fixed configuration, 4 KiB messages)
        np.testing.assert_allclose(d["fixed_losses"], d["ddp_losses"], rtol=1e-5, atol=1e-6)
        # and with a reconfiguration mid-training: scheduling changes when, never what
        np.testing.assert_allclose(d["react_losses"], d["ddp_losses"], rtol=1e-5, atol=1e-6)
    # the ranks saw different data (a DistributedSampler per rank), yet trained one model
    assert ranks[0]["ddp_losses"][:5] != ranks[1]["ddp_losses"][:5]


@pytest.mark.integration
def test_bf16_on_the_wire_trains_as_ddp_with_the_bf16_hook(tmp_path):
    res = run_ranks([SCRIPT, str(tmp_path), "--wire"], 2, timeout_s=400)
    for r in res:
        assert r.returncode == 0, f"rank {r.rank}:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in range(2)]
    for d in ranks:
        assert len(d["wire_losses"]) == len(d["hook_losses"]) == 64
        assert d["wire_config"] == {"partition_bytes": 4 * KiB, "credit_bytes": 16 * KiB, "wire": "bf16"}
        assert d["wire_bytes_per_iteration"] == 154408 // 2  # 2 bytes an element on the wire
        # the same numerics as DDP's bf16 hook, and not those of fp32
        np.testing.assert_allclose(d["wire_losses"], d["hook_losses"], rtol=1e-6, atol=1e-7)
        assert max(abs(a - b) for a, b in zip(d["wire_losses"], d["ddp_losses"])) > 1e-6
    assert ranks[0]["wire_weights"] == ranks[1]["wire_weights"]  # one model on every rank


def test_scheduler_carries_every_parameter(two_ranks):
    _, ranks, _ = two_ranks
    for d in ranks:
        s = d["fixed_stats"]
        assert s["bytes_per_iteration"] == s["param_bytes"] == 154408
        # every step's gradients went through the scheduler (the last step's too, before close)
        assert s["bytes_sent"] == 64 * s["param_bytes"]
        assert s["n_messages"] >= 64 * (s["param_bytes"] // (4 * KiB))


def test_reconfigures_when_the_job_slows_down_and_logs_it(two_ranks):
    out, ranks, res = two_ranks
    decisions = ranks[0]["react_decisions"]
    changes = [d for d in decisions if d["reconfigured"]]
    assert len(changes) == 1, decisions
    change = changes[0]
    assert change["step"] > 30 and "speed fell" in change["reason"]
    assert change["partition_bytes"] == 64 * KiB and change["previous"]["partition_bytes"] == 4 * KiB
    assert ranks[1]["react_decisions"] == []  # decided and logged on rank 0 only
    for d in ranks:
        assert d["react_config"] == {"partition_bytes": 64 * KiB, "credit_bytes": 256 * KiB}
    # printed once, by rank 0
    assert "AutoByte reconfigured at step" in res[0].stderr + res[0].stdout
    assert "AutoByte reconfigured" not in res[1].stderr + res[1].stdout
    # the Trainer's CSV logger got the window metrics and the reconfiguration
    (metrics,) = out.glob("logs/version_0/metrics.csv")
    rows = list(csv.DictReader(metrics.open()))
    windows = [r for r in rows if r.get("autobyte/observed_speed")]
    assert len(windows) == len(decisions)
    assert [float(r["autobyte/reconfigured"]) for r in windows].count(1.0) == 1
    assert any(r.get("autobyte/predicted_speed") for r in windows)
    assert {float(r["autobyte/partition_bytes"]) for r in rows if r.get("autobyte/partition_bytes")} == {4.0 * KiB, 64.0 * KiB}
    lines = (metrics.parent / "autobyte_decisions.jsonl").read_text().splitlines()
    assert [json.loads(x)["reason"] for x in lines] == [change["reason"]]


def test_resume_restores_tuner_state(two_ranks):
    _, ranks, _ = two_ranks
    saved = ranks[0]["react_state"]["engine"]  # rank 0 decides, and its checkpoint is the one every rank loads
    assert len(saved["controller"]["history"]) == len(ranks[0]["react_decisions"])
    for d in ranks:
        seen = d["resume"]
        assert seen["engine"]["controller"] == saved["controller"]
        assert seen["tuner"] == saved["controller"]["tuner"] and seen["tuner"]["reacted"] is True
        assert seen["n_decisions"] == len(ranks[0]["react_decisions"])
        # training went on from the checkpoint with the configuration the tuner had chosen
        assert seen["first_step"] == 64 and d["resume_global_step"] == 80
        assert seen["config_at_first_step"] == {"partition_bytes": 64 * KiB, "credit_bytes": 256 * KiB}


# ------------------------------------------------------------------- one process


class Tiny(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
        self.losses: list[float] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.cross_entropy(self.net(x), y)
        self.losses.append(float(loss.detach()))
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def _loader():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(48, 6, generator=g)
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8)


def _fit(callbacks, **kw):
    pl.seed_everything(0, verbose=False)
    model = Tiny()
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=6, callbacks=callbacks, logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, **kw)
    trainer.fit(model, _loader())
    return model


def test_world_size_one_just_trains():
    ref = _fit([])
    cb = AutoByteCallback(tuner="static", window_iters=2, warmup_iters=1)
    got = _fit([cb])
    assert got.losses == ref.losses
    for a, b in zip(ref.parameters(), got.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert cb.handle.world_size == 1
    assert len(cb.handle.controller.history) >= 1  # the tuner still saw windows of statistics
    assert "zero_grad" not in got.__dict__  # the model is handed back as it was


@pytest.mark.parametrize(
    "kw, exc, match",
    [
        ({"partition_bytes": 0}, ValueError, r"partition_bytes must be a positive integer, but got partition_bytes=0\."),
        ({"credit_bytes": "4MB"}, TypeError, r"credit_bytes must be a positive integer, but got credit_bytes='4MB'"),
        ({"tuner": "fastest"}, ValueError, r"tuner must be one of \[.*'static'.*\], a Tuner or None, but got tuner='fastest'"),
        ({"tuner": 3}, TypeError, r"tuner must be a tuner name, an autobyte Tuner or None, but got tuner=3"),
        ({"window_iters": 0}, ValueError, r"window_iters must be a positive integer, but got window_iters=0"),
        ({"warmup_iters": -1}, ValueError, r"warmup_iters must be a non-negative integer, but got warmup_iters=-1"),
        ({"overlap": "yes"}, TypeError, r"overlap must be True or False, but got overlap='yes'"),
        ({"space": [1, 2]}, TypeError, r"space must be an autobyte SearchSpace or None, but got space=\[1, 2\]"),
        ({"verbose": 1}, TypeError, r"verbose must be True or False, but got verbose=1"),
        ({"timeout_s": 0}, ValueError, r"timeout_s must be a positive number of seconds, but got timeout_s=0"),
        ({"wire": "fp8"}, ValueError, r"^wire must be one of 'fp32', 'bf16', 'fp16', 'auto' or an AutoWire, but got wire='fp8'\.$"),
    ],
)
def test_bad_arguments(kw, exc, match):
    with pytest.raises(exc, match=match):
        AutoByteCallback(**kw)


def test_wire_auto_starts_at_its_16_bits_and_is_handed_to_the_engine():
    from autobyte.core import AutoWire

    cb = AutoByteCallback(wire="auto")
    assert cb.wire == "auto" and cb.initial.wire == "bf16"
    fp16 = AutoByteCallback(wire=AutoWire(low="fp16", min_gain=0.1))
    assert fp16.wire == AutoWire(low="fp16", min_gain=0.1) and fp16.initial.wire == "fp16"


def test_gradient_clipping_needs_synchronous_mode(caplog):
    with pytest.raises(Exception, match=r"cannot work with gradient_clip_val=1\.0; pass AutoByteCallback\(overlap=False\)"):
        _fit([AutoByteCallback(tuner=None, overlap=True)], gradient_clip_val=1.0)
    ref = _fit([], gradient_clip_val=1.0)
    got = _fit([AutoByteCallback(tuner=None, overlap=False)], gradient_clip_val=1.0)
    assert got.losses == ref.losses
    # left unset, the callback chooses synchronous mode and says so once
    cb = AutoByteCallback(tuner=None)
    with caplog.at_level("INFO"):
        auto = _fit([cb], gradient_clip_val=1.0)
    assert auto.losses == ref.losses and cb.handle.overlap is False
    assert [r.getMessage() for r in caplog.records].count(
        "AutoByte: overlap=False because of gradient_clip_val=1.0: gradients are averaged by the end of backward, "
        "then Lightning's optimizer step runs as usual (no overlap with the next forward)."
    ) == 1


def test_unsupported_strategy_says_what_to_use():
    from lightning.pytorch.strategies import ModelParallelStrategy

    trainer = pl.Trainer(strategy=ModelParallelStrategy(), accelerator="cpu", devices=1, logger=False)
    with pytest.raises(Exception, match=r"but the Trainer uses ModelParallelStrategy; use Trainer\(strategy=\"ddp\"\)"):
        AutoByteCallback(tuner=None).setup(trainer, Tiny(), "fit")


def test_missing_lightning_gives_install_hint(monkeypatch):
    for name in ("lightning", "lightning.pytorch", "pytorch_lightning"):
        monkeypatch.setitem(sys.modules, name, None)  # what Python does for a package that is not installed
    monkeypatch.delitem(sys.modules, "autobyte.integrations.lightning")
    with pytest.raises(ImportError, match=r'needs PyTorch Lightning 2\.x .* install it with: pip install "autobyte\[lightning\]"'):
        import autobyte.integrations.lightning  # noqa: F401


def test_standalone_pytorch_lightning_is_accepted(monkeypatch):
    ptl = pytest.importorskip("pytorch_lightning")
    # a Trainer of the standalone package takes the callback as it is
    cb = AutoByteCallback(tuner="static", window_iters=2, warmup_iters=0)
    trainer = ptl.Trainer(accelerator="cpu", devices=1, max_steps=5, callbacks=[cb], logger=False,
                          enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)

    class PtlTiny(ptl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(6, 2)

        def training_step(self, batch, batch_idx):
            return torch.nn.functional.cross_entropy(self.net(batch[0]), batch[1])

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

    trainer.fit(PtlTiny(), _loader())
    assert trainer.global_step == 5 and len(cb.handle.controller.history) >= 1
    # and the module is chosen when it is the only one installed
    monkeypatch.setitem(sys.modules, "lightning.pytorch", None)
    assert ab_lightning._import_lightning() is ptl


def test_unsupported_lightning_version(monkeypatch):
    monkeypatch.setattr(pl, "__version__", "1.9.5")
    with pytest.raises(ImportError, match=r"autobyte supports lightning >=2\.4,<3\.0, but found lightning 1\.9\.5"):
        ab_lightning._import_lightning()


def test_tensorboard_gets_window_metrics_and_reasons(tmp_path, monkeypatch):
    pytest.importorskip("tensorboard")
    from autobyte.core.tuning import Controller

    # One process never tunes (nothing is communicated); here what is tested is how a decision is logged.
    monkeypatch.setattr(Controller, "tuning", property(lambda self: True))
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from autobyte.core import Config, SearchSpace
    from autobyte.core.tuners import GridTuner

    space = SearchSpace([Config(64, 64), Config(64, 256)])
    cb = AutoByteCallback(GridTuner(space), partition_bytes=64, credit_bytes=64, window_iters=2, warmup_iters=0, space=space)
    pl.seed_everything(0, verbose=False)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=6, callbacks=[cb], logger=TensorBoardLogger(tmp_path, name="tb"),
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Tiny(), _loader())
    ea = EventAccumulator(str(tmp_path / "tb" / "version_0"), size_guidance={"tensors": 0, "scalars": 0})
    ea.Reload()
    assert {"autobyte/observed_speed", "autobyte/reconfigured", "autobyte/credit_bytes"} <= set(ea.Tags()["scalars"])
    assert "autobyte/reconfiguration/text_summary" in ea.Tags()["tensors"]
    assert [e.value for e in ea.Scalars("autobyte/reconfigured")].count(1.0) == sum(d["reconfigured"] for d in cb.decisions) >= 1
    lines = (tmp_path / "tb" / "version_0" / "autobyte_decisions.jsonl").read_text().splitlines()
    reasons = [json.loads(x)["reason"] for x in lines]
    # the grid's moves; on a loaded host the do-no-harm guard may also send a slow 2-iteration window back to the start
    assert any("grid search" in r for r in reasons) and all("grid search" in r or r.startswith("guard:") for r in reasons)


def test_no_logger_writes_no_file_into_the_working_directory(tmp_path, monkeypatch, caplog):
    from autobyte.core import Config, SearchSpace
    from autobyte.core.tuners import GridTuner
    from autobyte.core.tuning import Controller

    # One process never tunes; here what is tested is where a decision goes.
    monkeypatch.setattr(Controller, "tuning", property(lambda self: True))
    monkeypatch.chdir(tmp_path)
    space = SearchSpace([Config(64, 64), Config(64, 256)])
    cb = AutoByteCallback(GridTuner(space), partition_bytes=64, credit_bytes=64, window_iters=2, warmup_iters=0, space=space)
    pl.seed_everything(0, verbose=False)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=6, callbacks=[cb], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    with caplog.at_level(logging.INFO):
        trainer.fit(Tiny(), _loader())
    assert sum(d["reconfigured"] for d in cb.decisions) >= 1
    assert "AutoByte reconfigured" in caplog.text
    assert list(tmp_path.iterdir()) == []
