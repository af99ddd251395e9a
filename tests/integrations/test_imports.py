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


@pytest.mark.integration
def test_top_level_surface_is_lazy_and_complete():
    # `import autobyte` imports no framework; every name in __all__ resolves, the framework ones on first use.
    code = (
        "import sys, autobyte\n"
        "assert not {'torch', 'keras', 'mxnet'} & set(sys.modules), sorted({'torch', 'keras', 'mxnet'} & set(sys.modules))\n"
        "missing = [n for n in autobyte.__all__ if getattr(autobyte, n, None) is None]\n"
        "assert not missing, missing\n"
        "from autobyte.integrations.torch import schedule\n"
        "assert autobyte.schedule is schedule\n"
        "assert set(autobyte.__all__) <= set(dir(autobyte))\n"
        "print('ok')\n"
    )
    import subprocess
    import sys

    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "ok", p.stderr[-2000:]


def test_unknown_top_level_name_is_an_attribute_error():
    import autobyte

    with pytest.raises(AttributeError, match="no attribute 'nonexistent'"):
        autobyte.nonexistent  # noqa: B018
