"""A missing optional package is an ImportError that names the exact pip line."""

from __future__ import annotations

import sys

import pytest

from autobyte.integrations._imports import pyplot, require_optional


@pytest.mark.parametrize("module, extra", [("matplotlib", "plots"), ("matplotlib.pyplot", "plots"), ("bayes_opt", "tune"), ("keras", "keras")])
def test_missing_optional_package_names_the_pip_line(monkeypatch, module, extra):
    monkeypatch.setitem(sys.modules, module.split(".")[0], None)  # what Python does for a package that is not installed
    if "." in module:
        monkeypatch.setitem(sys.modules, module, None)
    top = module.split(".")[0]
    with pytest.raises(ImportError, match=rf"doing X needs {top}, which is not installed; install it with: pip install 'autobyte\[{extra}\]'"):
        require_optional(module, "doing X")


def test_pyplot_without_matplotlib(monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"plotting needs matplotlib, .* pip install 'autobyte\[plots\]'"):
        pyplot("plotting")


def test_evaluate_says_what_to_install_before_simulating(monkeypatch, tmp_path):
    from autobyte.meta._evaluate import run_all

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ImportError, match=r"autobyte evaluate\) needs matplotlib, .* pip install 'autobyte\[plots\]'"):
        run_all(tmp_path, only={"fig7"})
    assert not (tmp_path / "figures" / "eval_results.json").exists()


def test_bo_without_bayesian_optimization_names_the_extra(monkeypatch):
    from autobyte.core.space import SearchSpace, BYTESCHEDULER_DEFAULT
    from autobyte.core.tuners import make_tuner

    monkeypatch.setitem(sys.modules, "bayes_opt", None)
    with pytest.raises(ImportError, match=r"pip install 'autobyte\[tune\]'"):
        make_tuner("bo", arch="ps").start(SearchSpace.default(), BYTESCHEDULER_DEFAULT)


def test_training_the_meta_network_without_keras_names_the_extra(monkeypatch, tmp_path):
    from autobyte.meta._keras import import_keras

    monkeypatch.setitem(sys.modules, "keras", None)
    with pytest.raises(ImportError, match=r"training the meta-network needs Keras 3 .*pip install 'autobyte\[keras\]'.*Using the shipped network needs neither"):
        import_keras()
