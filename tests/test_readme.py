"""The README's snippets are the documented, tested ones, and its commands exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _blocks(text: str, lang: str = "python") -> list[str]:
    return [b.strip() for b in re.findall(rf"```{lang}\n(.*?)```", text, flags=re.S)]


@pytest.mark.parametrize("doc", ["lightning", "keras"])
def test_framework_snippet_is_the_tested_one(doc):
    tested = re.search(r"<!-- snippet: %s -->\s*```python\n(.*?)```" % doc, (ROOT / "docs" / f"{doc}.md").read_text(), re.S)
    assert tested, f"docs/{doc}.md lost its tested snippet marker"
    assert tested.group(1).strip() in _blocks(README)


def test_mxnet_one_line_is_in_the_tested_program():
    line = next(b for b in _blocks(README) if "AutoByteHandler" in b)
    assert line in (ROOT / "docs" / "mxnet.md").read_text()


def test_first_screen_has_install_and_test_commands():
    first = README.split("## ")[0]
    cmds = _blocks(first, "bash")
    assert cmds[:2] == ['pip install -e ".[all,dev]"', "python -m pytest -q"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "python -m pytest -q" in ci and 'pip install -q -e ".[all,dev]"' in ci


def test_static_checks_are_the_ones_ci_runs():
    first = README.split("## ")[0]
    check = next(b for b in _blocks(first, "bash") if "mypy" in b)
    ci = (ROOT / ".ci" / "run").read_text()
    main_env = ci.split("# ----")[0]  # the [all,dev] environment, before the lightning-only one
    for cmd in check.split(" && "):
        assert re.search(rf"^{re.escape(cmd)}\b", main_env, flags=re.M), cmd
    assert main_env.index("python -m pyflakes") < main_env.index("python -m pytest")


def test_plain_pytorch_snippet_runs():
    torch = pytest.importorskip("torch")
    snippet = next(b for b in _blocks(README) if "integrations.torch import schedule" in b)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scope = {"model": model, "optimizer": optimizer}
    exec(snippet, scope)  # world size 1: trains unchanged, statistics only
    handle = scope["handle"]
    for _ in range(5):  # the tuner skips 2 warm-up iterations; the 5th begins, so 2 complete
        optimizer.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        optimizer.step()
    assert handle.window_stats().n_iters == 2
    handle.close()


def test_cli_lists_every_documented_command():
    from autobyte.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    for cmd in re.findall(r"`autobyte ([a-z-]+)", README):
        if cmd != "COMMAND":
            assert cmd.split()[0] in sub.choices, cmd
