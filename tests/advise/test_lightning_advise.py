"""``AutoByteCallback.advise_ddp()``: the advice from a real Lightning job's own statistics."""

from __future__ import annotations

import json
import os

import pytest

from autobyte.testing import run_ranks

pl = pytest.importorskip("lightning.pytorch")
torch = pytest.importorskip("torch")

from autobyte.integrations.lightning import AutoByteCallback  # noqa: E402


class Net(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(32, 256), torch.nn.ReLU(), torch.nn.Linear(256, 256),
                                       torch.nn.ReLU(), torch.nn.Linear(256, 4))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-2)


class AdviseAfterFirstWindow(pl.Callback):
    """What a user adds to print the advice from inside the job (docs/advise.md)."""

    def __init__(self, cb: AutoByteCallback, at_step: int) -> None:
        self.cb, self.at_step, self.advice = cb, at_step, None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.at_step and self.advice is None:
            self.advice = self.cb.advise_ddp(n_workers=2, bandwidth_gbps=1.0, sensitivity=False, engine=False)


def test_advice_from_a_running_job():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(96, 32, generator=g)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8)
    cb = AutoByteCallback(tuner=None, verbose=False)
    adv = AdviseAfterFirstWindow(cb, at_step=10)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=12, callbacks=[cb, adv], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Net(), data)
    a = adv.advice
    assert a is not None
    n_bytes = 4 * sum(p.numel() for p in Net().parameters())
    assert a.model.total_bytes == n_bytes and a.model.batch_size == 8
    assert a.model.n_layers == 6  # the engine's gradient tensors (weights and biases)
    assert a.compute.iter_time_s > 0 and "running job" in a.sources["compute"]
    assert "DistributedDataParallel(model, " in str(a)
    # a single process sends nothing: the link must be given
    with pytest.raises(ValueError, match="bandwidth_gbps must be given"):
        cb.advise_ddp(n_workers=2)


def test_before_fitting_says_when_to_call():
    with pytest.raises(RuntimeError, match="after the first window"):
        AutoByteCallback(tuner=None).advise_ddp(n_workers=2, bandwidth_gbps=1.0)


@pytest.mark.integration
def test_advice_from_a_real_two_rank_ddp_job():
    """2 Lightning ranks on gloo (strategy="ddp"); each asks for the advice after its first window, with the
    link measured by the job itself."""
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "lightning_advise_rank.py")
    res = run_ranks([script], 2, timeout_s=300, one_node_per_rank=True)
    for r in res:
        assert r.returncode == 0, f"rank {r.rank}:\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    got = [json.loads(ln[len("ADVICE "):]) for r in res for ln in r.stdout.splitlines() if ln.startswith("ADVICE ")]
    assert sorted(a["rank"] for a in got) == [0, 1]
    n_bytes = 4 * (32 * 512 + 512 + 512 * 512 + 512 + 512 * 4 + 4)
    for a in got:
        assert a["n_workers"] == 2 and a["batch_size"] == 8
        assert a["gradient_bytes"] == n_bytes and a["n_layers"] == 6  # the engine's tensors: weights and biases
        assert a["bandwidth_gbps"] > 0 and "measured in the window" in a["sources"]["bandwidth"]
        assert a["ddp_best"]["samples_per_s"] > 0 and a["ddp_args"].startswith(("bucket_cap_mb", "(defaults"))
        assert sum(1 for p in a["ddp"]) == 11  # the default and the 10 sizes
