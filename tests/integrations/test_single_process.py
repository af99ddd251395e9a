"""World size 1 in a real Lightning fit: one start-up line, then no decision and no output from AutoByte."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pl = pytest.importorskip("lightning.pytorch")

from autobyte.testing import AlwaysMove  # noqa: E402
from autobyte.integrations.lightning import AutoByteCallback  # noqa: E402




class Tiny(pl.LightningModule):
    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return torch.nn.functional.cross_entropy(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=1e-2)


def _fit(cb, steps=40):
    pl.seed_everything(0, verbose=False)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 6, generator=g)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, (x[:, 0] > 0).long()), batch_size=8)
    trainer = pl.Trainer(accelerator="cpu", devices=1, max_steps=steps, callbacks=[cb], logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Tiny(), loader)


@pytest.mark.parametrize("tuner", ["always-move", "autobyte"])
def test_one_process_makes_no_decision_and_prints_one_line(tuner, capsys, caplog):
    t = AlwaysMove() if tuner == "always-move" else "autobyte"
    cb = AutoByteCallback(tuner=t, window_iters=4, warmup_iters=1)
    start = cb.initial
    with caplog.at_level("INFO"):
        _fit(cb)
    out = capsys.readouterr().out + capsys.readouterr().err + caplog.text
    lines = [ln for ln in out.splitlines() if "AutoByte" in ln or "autobyte" in ln]
    assert len(lines) == 1 and "nothing to synchronise" in lines[0], lines
    assert cb.handle.world_size == 1
    assert cb.handle.config == start
    assert not any(d.get("reconfigured") for d in cb.decisions)
    assert len(cb.handle.controller.history) >= 5  # statistics were still collected
    if isinstance(t, AlwaysMove):
        assert t.seen == 0
