"""Lightning integration: one callback puts DDP's gradient traffic under AutoByte.

Usage (the only line that changes in a Lightning script is ``callbacks=``)::

    import lightning.pytorch as pl
    from autobyte.integrations.lightning import AutoByteCallback

    trainer = pl.Trainer(strategy="ddp", accelerator="cpu", devices=2, callbacks=[AutoByteCallback()])
    trainer.fit(model, datamodule)

The callback keeps Lightning's DDP strategy (launch, process group, samplers,
logging, checkpoints) and only replaces the ``DistributedDataParallel``
wrapper by the scheduled engine of :mod:`autobyte.integrations.torch`: it
tells the strategy not to wrap the module, then schedules the module and its
optimizer when fitting starts. ``pytorch_lightning`` 2.x works the same way.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import sys
import warnings
from types import ModuleType
from typing import Any, Iterator

from ..core.space import BYTESCHEDULER_DEFAULT, Config, SearchSpace
from ..core.tuning import Tuner
from ..core.window import DecisionRecord, WindowOutcome
from ..core.wire import AutoWire
from ..core._checks import check_bool
from ._common import CallbackState, check_tuning_args
from ._imports import check_version

__all__ = ["AutoByteCallback"]

#: Strategy class names (looked up in the strategy's MRO, so subclasses count)
#: whose DDP wrap the callback replaces, and those that mean "one process".
_DDP_STRATEGIES = ("DDPStrategy",)
_SINGLE_STRATEGIES = ("SingleDeviceStrategy",)

_INSTALL_HINT = 'pip install "autobyte[lightning]"'


def _import_lightning() -> ModuleType:
    """``lightning.pytorch``, or ``pytorch_lightning`` when only that one is there (or already in use).

    Raises:
        ImportError: neither is installed (with the install command), or the
            version is outside the supported range.
    """
    names = ["lightning.pytorch", "pytorch_lightning"]
    if "pytorch_lightning" in sys.modules and "lightning.pytorch" not in sys.modules:
        names.reverse()  # the user's script already chose the standalone package
    for name in names:
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        check_version("lightning", str(getattr(mod, "__version__", "0.0")))
        return mod
    raise ImportError(
        "autobyte.integrations.lightning needs PyTorch Lightning 2.x (package lightning or pytorch_lightning), "
        f"which is not installed; install it with: {_INSTALL_HINT}"
    )


pl = _import_lightning()
from . import torch as _engine  # noqa: E402  (imports torch with its own install hint)
from ._torch_setup import end_gloo_at_exit  # noqa: E402

_torch = _engine.torch


def _callback_bases() -> tuple[type, ...]:
    # Both packages may be installed side by side; a Trainer of either accepts the callback.
    bases: list[type] = [pl.Callback]
    for other in ("lightning.pytorch", "pytorch_lightning"):
        mod = sys.modules.get(other)
        if mod is not None and mod is not pl and getattr(mod, "Callback", None) not in (None, pl.Callback):
            bases.append(mod.Callback)
    return tuple(bases)


def _mro_names(obj: Any) -> set[str]:
    return {c.__name__ for c in type(obj).__mro__}


def _rank_zero_info(trainer: Any, msg: str) -> None:
    if trainer.is_global_zero:
        pl.utilities.rank_zero_info(msg)


def _batch_size(batch: Any) -> int:
    extract = importlib.import_module(pl.__name__ + ".utilities.data").extract_batch_size
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return max(1, int(extract(batch)))
    except Exception:  # noqa: BLE001 - an unknown batch type only affects the samples/s statistic
        return 1


class AutoByteCallback(CallbackState, *_callback_bases()):  # type: ignore[misc]
    """Schedule and auto-tune DDP's gradient communication; add it to ``Trainer(callbacks=[...])``.

    With ``strategy="ddp"`` (or ``"ddp_spawn"``, ``"ddp_fork"``,
    ``"ddp_notebook"``, ``DDPStrategy(...)``) the callback stops the strategy
    from wrapping the module in ``DistributedDataParallel`` and averages the
    gradients itself: partitioned, prioritised (layers nearest the input
    first) and under a credit window of bytes in flight, with
    ``<partition_bytes, credit_bytes>`` chosen by ``tuner`` between
    iterations. Results are those of plain DDP; only the timing changes. On a
    single device it trains unchanged and only collects statistics.

    Every tuning window it logs ``autobyte/observed_speed`` (samples/s, all
    ranks), ``autobyte/predicted_speed`` (when the tuner predicts one),
    ``autobyte/partition_bytes``, ``autobyte/credit_bytes`` and
    ``autobyte/reconfigured`` to the Trainer's loggers; each reconfiguration
    and its reason is printed on rank 0, written to
    ``<trainer.log_dir>/autobyte_decisions.jsonl`` (when the Trainer has a
    logger; with ``logger=False`` no file is written) and, with a TensorBoard
    logger, added as text. Its state (configuration, tuner, decision history)
    is saved in Lightning checkpoints and restored on resume.

    Args:
        tuner: ``"autobyte"`` (the meta-network, default), ``"static"``,
            ``"grid"``, ``"bo"``, a :class:`~autobyte.core.tuning.Tuner`, or
            ``None`` for a fixed configuration.
        partition_bytes: first message size (default: ByteScheduler's, 4 MB).
        credit_bytes: first credit, most bytes in flight (default 16 MB).
        window_iters: training steps per tuning window (default 10).
        warmup_iters: steps ignored at start and after each change (default 2).
        overlap: ``None`` (default): choose for the Trainer, said once in the
            log: True unless gradient clipping, manual optimization or a
            grad scaler (16-bit mixed precision) needs False.
            True: update each parameter as soon as its gradient is averaged,
            overlapping communication with the next forward pass (gradient
            accumulation works: one communication round per optimizer step).
            False: average every gradient by the end of ``backward()`` like
            DDP, then Lightning's optimizer step runs as usual.
        space: candidate configurations for the tuner (default
            :meth:`SearchSpace.default`).
        verbose: print the set-up and each reconfiguration on rank 0 (default True).
        timeout_s: longest wait for a peer rank before failing (default 300).
        wire: the gradients' precision on the wire, ``"fp32"`` (default, exact),
            ``"bf16"`` or ``"fp16"`` (the numerics of DDP's compression hooks;
            docs/torch.md, "16-bit gradients on the wire"); ``"auto"``: fp32
            unless bf16 is measured at least 5% faster in the current conditions,
            starting at bf16, the first precision measured
            (:class:`autobyte.core.wire.AutoWire` for another preference).

    Raises:
        TypeError, ValueError: an invalid argument (at construction).
        lightning.fabric.utilities.exceptions.MisconfigurationException: a
            Trainer set-up the callback cannot schedule (another strategy, or
            an option that needs ``overlap=False``); the message says what to change.

    Example:
        >>> trainer = pl.Trainer(strategy="ddp", devices=2, callbacks=[AutoByteCallback()])  # doctest: +SKIP
    """

    def __init__(
        self,
        tuner: str | Tuner | None = "autobyte",
        *,
        partition_bytes: int = BYTESCHEDULER_DEFAULT.partition_bytes,
        credit_bytes: int = BYTESCHEDULER_DEFAULT.credit_bytes,
        window_iters: int = 10,
        warmup_iters: int = 2,
        overlap: bool | None = None,
        space: SearchSpace | None = None,
        verbose: bool = True,
        timeout_s: float = 300.0,
        wire: "str | AutoWire" = "fp32",
    ) -> None:
        self.initial = check_tuning_args(tuner, partition_bytes, credit_bytes, window_iters, warmup_iters, space, verbose, timeout_s, wire)
        self.wire = wire
        if overlap is not None:
            check_bool("overlap", overlap)
        self._tuner_arg = tuner
        self.tuner: Tuner | None = tuner if isinstance(tuner, Tuner) else None
        self.window_iters = window_iters
        self.warmup_iters = warmup_iters
        self.overlap = overlap
        self._overlap = overlap is not False  # the mode in force, settled in setup()
        self._accumulating = False
        self.space = space
        self.verbose = verbose
        self.timeout_s = float(timeout_s)
        #: The engine's handle of the current (or last) fit: ``config``, ``window_stats()``,
        #: ``bytes_per_iteration``, ``controller.history``; ``synchronize()`` while fitting.
        self.handle: _engine.ScheduledTraining | None = None
        self._active = False
        #: One record per tuning window on rank 0: step, configuration, speeds, reason.
        self.decisions: list[dict[str, Any]] = []
        self._restored: dict[str, Any] | None = None
        self._patched_strategy: Any = None
        self._log_dir: str | None = None
        self._trainer: Any = None

    def advise_ddp(self, **kwargs: Any) -> Any:
        """DDP's ``bucket_cap_mb`` for this job from this rank's statistics so far (:func:`autobyte.advise`, docs/advise.md)."""
        from .._advise import advise_from_handle

        return advise_from_handle(self.handle, **kwargs)

    @property
    def state_key(self) -> str:
        name = self._tuner_arg if isinstance(self._tuner_arg, str) or self._tuner_arg is None else type(self._tuner_arg).__name__
        return self._generate_state_key(tuner=name)

    @property
    def _live(self) -> _engine.ScheduledTraining:
        """The handle while fitting (the hooks that use it run only then)."""
        if self.handle is None:
            raise RuntimeError("AutoByteCallback: the engine is not running (fitting has not started).")
        return self.handle

    @property
    def config(self) -> Config:
        """The configuration in force (the initial one before fitting)."""
        if self.handle is not None:
            return self.handle.config
        return self.initial

    # ------------------------------------------------------------------ set-up
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        strategy = trainer.strategy
        names = _mro_names(strategy)
        exc = _misconfiguration()
        if any(n in names for n in _DDP_STRATEGIES):
            if getattr(strategy, "_ddp_comm_hook", None) is not None:
                warnings.warn("autobyte: the DDP strategy's ddp_comm_hook is ignored; AutoByteCallback averages the gradients itself.", stacklevel=2)
            # Lightning wraps the module in configure_ddp(); skipping it (on this
            # strategy instance only) leaves gradient averaging to the scheduler.
            strategy.configure_ddp = _no_ddp_wrap
            # Lightning skips DDP's sync on accumulating micro-batches with block_backward_sync(),
            # which only knows a DDP-wrapped module: point it at the engine's no_sync().
            strategy.block_backward_sync = self._block_backward_sync
            self._patched_strategy = strategy
        elif not any(n in names for n in _SINGLE_STRATEGIES):
            raise exc(
                f"AutoByteCallback schedules DDP's gradient all-reduce, but the Trainer uses {type(strategy).__name__}; "
                "use Trainer(strategy=\"ddp\") (or \"ddp_spawn\", \"ddp_fork\", \"ddp_notebook\", DDPStrategy(...)) "
                "or a single device, or remove AutoByteCallback."
            )
        needs = []
        if trainer.gradient_clip_val:
            needs.append(f"gradient_clip_val={trainer.gradient_clip_val}")
        if not pl_module.automatic_optimization:
            needs.append("manual optimization (automatic_optimization=False)")
        if getattr(trainer.precision_plugin, "scaler", None) is not None:
            needs.append(f"precision={trainer.precision_plugin.precision!r} with a grad scaler")
        if self.overlap is None:
            self._overlap = not needs
            if needs and self.verbose:
                _rank_zero_info(
                    trainer,
                    f"AutoByte: overlap=False because of {', '.join(needs)}: gradients are averaged by the end of "
                    "backward, then Lightning's optimizer step runs as usual (no overlap with the next forward).",
                )
        elif self.overlap and needs:
            raise exc(
                f"AutoByteCallback(overlap=True) updates each parameter as soon as its gradient is averaged, "
                f"which cannot work with {', '.join(needs)}; pass AutoByteCallback(overlap=False) or leave overlap "
                "unset (the callback then chooses: gradients are averaged at the end of backward and Lightning's step runs as usual)."
            )

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        if isinstance(trainer.strategy.model, _torch.nn.parallel.DistributedDataParallel):
            raise _misconfiguration()(
                "the module was wrapped in DistributedDataParallel before AutoByteCallback could take over; "
                "pass AutoByteCallback in Trainer(callbacks=[...]) rather than adding it after fitting started."
            )
        optimizer = None
        if self._overlap and len(trainer.optimizers) != 1:
            if self.overlap:
                raise _misconfiguration()(
                    f"AutoByteCallback(overlap=True) needs exactly one optimizer, but configure_optimizers returned "
                    f"{len(trainer.optimizers)}; pass AutoByteCallback(overlap=False) or leave overlap unset."
                )
            self._overlap = False
            if self.verbose:
                _rank_zero_info(trainer, f"AutoByte: overlap=False because configure_optimizers returned {len(trainer.optimizers)} optimizers.")
        if self._overlap:
            optimizer = trainer.optimizers[0]
        if self.tuner is None and isinstance(self._tuner_arg, str):
            from ..core.wire import check_wire_choice, tuner_for

            self.tuner = tuner_for(self._tuner_arg, check_wire_choice(self.wire))  # wire="auto": one per precision
        self._trainer = trainer
        log_dir = trainer.log_dir  # a collective in Lightning: every rank asks here, once
        # Without a logger, log_dir is the working directory: write no file there the user did not ask for.
        self._log_dir = log_dir if trainer.loggers else None
        self.handle = _engine.schedule(
            pl_module, optimizer,
            partition_bytes=self.initial.partition_bytes, credit_bytes=self.initial.credit_bytes, wire=self.wire,
            overlap=self._overlap, timeout_s=self.timeout_s, tuner=self.tuner, space=self.space,
            window_iters=self.window_iters, warmup_iters=self.warmup_iters,
            on_decision=self._on_decision, iteration_hooks=False,
        )
        self._active = True
        if self.handle.world_size > 1:
            end_gloo_at_exit()  # Lightning leaves a gloo group to finalization, which can abort
        if self._restored is not None:
            self.handle.load_state_dict(self._restored.get("engine", {}))
            self.decisions = [dict(d) for d in self._restored.get("decisions", [])]
            self._restored = None
        h = self.handle
        if not self.verbose:
            return
        if h.world_size == 1:
            _rank_zero_info(trainer, f"AutoByte: world size 1, nothing to synchronise; collecting statistics only ({h.config}).")
        else:
            tuner = type(self.tuner).__name__ if self.tuner is not None else "none"
            _rank_zero_info(
                trainer,
                f"AutoByte: scheduling {h.bytes_per_iteration} gradient bytes per step over {h.world_size} ranks, "
                f"starting at {h.config}, tuner {tuner}.",
            )

    # --------------------------------------------------------------- per step
    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        if self._active:
            # An accumulating micro-batch (backward under no_sync, no step) belongs to the next
            # synchronised step, as in DDP: only the step's last micro-batch starts an iteration.
            self._accumulating = trainer.accumulate_grad_batches > 1 and bool(trainer.fit_loop._should_accumulate())
            if self._accumulating:
                self._live.add_samples(_batch_size(batch))
            else:
                self._live.begin_iteration(_batch_size(batch))

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        if self._active and not self._accumulating:
            self._live.forward_done()

    @contextlib.contextmanager
    def _block_backward_sync(self) -> Iterator[None]:
        if self._active:
            with self._live.no_sync():
                yield
        else:
            yield

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self._active:
            cfg = self._live.config
            pl_module.log("autobyte/partition_bytes", float(cfg.partition_bytes), on_step=True, on_epoch=False, batch_size=1)
            pl_module.log("autobyte/credit_bytes", float(cfg.credit_bytes), on_step=True, on_epoch=False, batch_size=1)

    @property
    def reconfigurations(self) -> list[DecisionRecord]:
        """Every reconfiguration of the current (or last) fit on this rank, as every engine records them."""
        return [] if self.handle is None else self.handle.reconfigurations

    def _on_decision(self, out: WindowOutcome) -> None:
        trainer = self._trainer
        if trainer is None or not trainer.is_global_zero or not self._active:
            return
        decision, config = out.decision, out.config
        record: dict[str, Any] = {
            "step": int(trainer.global_step), "iteration": out.iteration,
            "partition_bytes": config.partition_bytes, "credit_bytes": config.credit_bytes,
            "observed_speed": out.speed, "reconfigured": decision is not None,
        }
        if decision is not None:
            record.update(
                previous=decision.old.to_dict(), predicted_speed=decision.predicted_speed, reason=decision.reason,
            )
        self.decisions.append(record)
        metrics = {"autobyte/partition_bytes": float(config.partition_bytes), "autobyte/credit_bytes": float(config.credit_bytes),
                   "autobyte/reconfigured": float(decision is not None)}
        if record["observed_speed"] is not None:
            metrics["autobyte/observed_speed"] = float(record["observed_speed"])
        if decision is not None and decision.predicted_speed is not None:
            metrics["autobyte/predicted_speed"] = float(decision.predicted_speed)
        for logger in trainer.loggers:
            logger.log_metrics(metrics, step=trainer.global_step)
        if decision is None:
            return
        text = f"step {trainer.global_step}: {decision.old} -> {config}: {decision.reason}"
        if decision.predicted_speed is not None:
            text += f" (predicted {decision.predicted_speed:.1f} samples/s, observed {record['observed_speed']:.1f})"
        for logger in trainer.loggers:
            experiment = getattr(logger, "experiment", None)
            if "TensorBoardLogger" in _mro_names(logger) and experiment is not None and hasattr(experiment, "add_text"):
                experiment.add_text("autobyte/reconfiguration", text, trainer.global_step)
        if self._log_dir:
            os.makedirs(self._log_dir, exist_ok=True)
            with open(os.path.join(self._log_dir, "autobyte_decisions.jsonl"), "a") as f:
                f.write(json.dumps(record) + "\n")
        if self.verbose:
            _rank_zero_info(trainer, f"AutoByte reconfigured at {text}")

    # ------------------------------------------------------------ end of fit
    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        # Before the strategy's teardown moves optimizers: every pending update lands here.
        self._close()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        try:
            self._close()
        except Exception as exc:  # noqa: BLE001 - the original exception is the one to report
            warnings.warn(f"autobyte: cleaning up after {type(exception).__name__} failed: {exc}", stacklevel=2)
        self._unpatch()

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit":
            self._close()
            self._unpatch()

    def _close(self) -> None:
        if not self._active:
            return
        try:
            self._live.close()
        finally:
            self._active = False
            self._trainer = None

    def _unpatch(self) -> None:
        if self._patched_strategy is not None:
            self._patched_strategy.__dict__.pop("configure_ddp", None)
            self._patched_strategy.__dict__.pop("block_backward_sync", None)
            self._patched_strategy = None



def _no_ddp_wrap() -> None:
    """Stands in for ``DDPStrategy.configure_ddp``: the module stays unwrapped."""


def _misconfiguration() -> type[Exception]:
    return pl.utilities.exceptions.MisconfigurationException  # type: ignore[no-any-return]
