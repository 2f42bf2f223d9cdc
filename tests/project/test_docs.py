"""The docs site builds with `mkdocs build --strict`, and its generated references are complete:
every CLI command and option, every config key, every module of the package tree."""

from __future__ import annotations

import html
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest
from testkit import ROOT

pytestmark = pytest.mark.heavy


def _hooks():
    spec = importlib.util.spec_from_file_location("docs_hooks", ROOT / "docs" / "hooks.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _text(page: Path) -> str:
    """The page's visible text, tags removed and entities decoded."""
    return html.unescape(re.sub(r"<[^>]+>", "", page.read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("site")
    env = {
        **os.environ,
        "NO_MKDOCS_2_WARNING": "1",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(ROOT / "mkdocs.yml"),
            "-d",
            str(out),
        ],
        check=False,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return out


def _commands(command: click.Command, path: str):
    yield path, command
    if isinstance(command, click.Group):
        for name, sub in command.commands.items():
            yield from _commands(sub, f"{path} {name}")


def test_cli_reference_lists_every_command_and_option(site):
    from search.cli.main import main

    page = _text(site / "reference" / "cli" / "index.html")
    assert "Sentinel" not in page  # mkdocs-click on Click >= 8.3, see docs/hooks.py
    missing = []
    for path, command in _commands(main, "bertindex"):
        # each command's section runs from its heading to the next command's heading
        start = page.find(f"{path}¶")
        if start < 0:
            missing.append(path)
            continue
        section = page[start:]
        following = re.search(r"\nbertindex [a-z -]+¶", section[len(path) + 1 :])
        if following:
            section = section[: len(path) + 1 + following.start()]
        for param in command.params:
            if isinstance(param, click.Option):
                for opt in param.opts:
                    if opt not in section:
                        missing.append(f"{path} {opt}")
        first_line = command.help.split("\n")[0].replace("`", "").strip() if command.help else ""
        if first_line and first_line not in section:
            missing.append(f"{path}: help text")
    assert not missing, f"not in the CLI reference: {missing}"


def test_config_reference_lists_every_key(site):
    page = _text(site / "reference" / "config" / "index.html")
    keys = [dotted for dotted, _, _ in _hooks().config_keys()]
    assert len(keys) > 40
    assert not [k for k in keys if k not in page], "config keys missing from the reference"


def test_every_config_key_has_a_description():
    assert not [k for k, _, f in _hooks().config_keys() if not f.description], (
        "add Field(description=...) in indexer/config/"
    )


def test_module_map_lists_every_module(site):
    page = _text(site / "architecture" / "index.html")
    modules = []
    for package in ("indexer", "flows", "search"):
        for path in (ROOT / package).rglob("*.py"):
            if "__pycache__" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules.append(".".join(parts))
    assert len(modules) > 30
    assert not [m for m in modules if m not in page], "modules missing from the module map"


def _anchor(heading: str) -> str:
    """The anchor mkdocs (and GitHub) give a heading: lower case, punctuation dropped."""
    slug = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return re.sub(r"[ ]+", "-", slug)


def test_readme_is_short_and_its_links_resolve():
    """The README stays an entry page (at most 200 lines; figures live in docs/benchmarks.md),
    and every relative link in it names a file that exists and, with `#`, a heading in it."""
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 200
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        page = ROOT / path
        if not page.is_file():
            broken.append(target)
        elif anchor and page.suffix == ".md":
            headings = re.findall(r"^#+ (.+)$", page.read_text(encoding="utf-8"), re.M)
            if anchor not in {_anchor(h) for h in headings}:
                broken.append(target)
    assert not broken, f"README links that resolve to nothing: {broken}"
