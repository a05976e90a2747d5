"""The docs: the generated reference pages match the code, they cover every field and flag, the
README's links resolve, and the site builds strictly without touching the network."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import importlib.util
import re
import socket
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("docs_gen", ROOT / "docs" / "gen.py")
assert _spec is not None and _spec.loader is not None
gen = importlib.util.module_from_spec(_spec)
sys.modules["docs_gen"] = gen  # dataclasses look their module up while the module runs
_spec.loader.exec_module(gen)


def _diff(path: Path, text: str) -> str:
    old = path.read_text(encoding="utf-8").splitlines() if path.is_file() else []
    lines = list(difflib.unified_diff(old, text.splitlines(), "committed", "from the code", lineterm="", n=0))
    return "\n".join(lines[:12])


def test_generated_pages_match_the_code():
    pages = gen.pages()
    stale = gen.stale()
    details = "\n".join(f"{p.relative_to(ROOT)}:\n{_diff(p, pages[p])}" for p in stale)
    assert not stale, f"generated docs pages are stale; refresh them with: {gen.REFRESH}\n{details}"


def test_a_stale_or_missing_page_is_found(tmp_path):
    pages = gen.pages()
    for path, text in pages.items():
        target = tmp_path / path.relative_to(gen.DOCS)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    assert gen.stale(tmp_path) == []
    cli, fields = tmp_path / "reference" / "cli.md", tmp_path / "reference" / "sweep-fields.md"
    cli.write_text(cli.read_text().replace("--smoke", "--smoky"), encoding="utf-8")
    fields.unlink()
    assert gen.stale(tmp_path) == [fields, cli]


def _section(page: str, anchor: str) -> str:
    """The text of the section whose heading carries {#anchor}, up to the next heading of any level."""
    match = re.search(r"^#+ .*\{#" + re.escape(anchor) + r"\}$(.*?)(?=^#+ |\Z)", page, re.M | re.S)
    assert match, f"no section {anchor}"
    return match.group(1)


def test_every_field_of_every_section_has_its_row():
    from gatedmodels.typedconfig import hints
    from orchestrator.spec.sweep import SweepSpec
    from orchestrator.spec.trial import TrialConfig

    page = gen.sweep_fields_page()
    seen: dict[type, str] = {}
    sections = [*gen.walk(gen.Section("sweep", SweepSpec, [(SweepSpec, "")]), seen)]
    sections += [*gen.walk(gen.Section("trial", TrialConfig, [(TrialConfig, "")]), seen)]
    paths = {s.path for s in sections}
    assert {"search", "model", "model.gate", "model.attention", "data.bigram", "eval.tasks", "train.spikes"} <= paths
    for section in sections:
        text = _section(page, gen.anchor(section.path))
        docs = section.cls.field_docs()
        for f in dataclasses.fields(section.cls):
            row = next((line for line in text.splitlines() if line.startswith(f"| `{f.name}` |")), None)
            assert row is not None, f"{section.path}.{f.name} has no row"
            if docs.get(f.name):
                assert gen.cell(docs[f.name]) in row, f"{section.path}.{f.name}: description missing"
            values = gen.literal_values(hints(section.cls)[f.name])
            for value in values or []:
                assert f"`{value}`" in row, f"{section.path}.{f.name}: allowed value {value} missing"
    # a bound from an enclosing config (TrialConfig.LIMITS bounds model.d_model) reaches the row
    assert "| `1..65,536` |" in next(line for line in _section(page, "model").splitlines() if line.startswith("| `d_model` |"))


def test_every_command_and_flag_is_in_the_cli_reference():
    from orchestrator.cli.main import COMMANDS, build_parser

    page = gen.cli_page()
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert list(sub.choices) == list(COMMANDS)
    for name, parser in sub.choices.items():
        text = _section(page, name)
        for action in parser._actions:
            for flag in action.option_strings:
                if flag not in ("-h", "--help"):
                    assert f"`{flag}" in text, f"gatesweep {name} {flag} is not in the reference"
            if isinstance(action, argparse._SubParsersAction):
                for sub_name in action.choices:
                    _section(page, gen.anchor(f"{name}.{sub_name}"))
    assert "[--resume | --fresh]" in _section(page, "train")  # exclusive flags shown as argparse does


# ---- the README's links -----------------------------------------------------------------------
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def broken_links(markdown: str, folder: Path) -> list[str]:
    """Relative link targets in `markdown` (outside code) that name no file or folder under `folder`."""
    text = re.sub(r"```.*?```", "", markdown, flags=re.S)
    text = re.sub(r"`[^`]*`", "", text)
    out = []
    for target in LINK.findall(text):
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.I) or target.startswith("#"):
            continue  # a URL (https:, mailto:) or an anchor of the page itself
        path = target.split("#")[0]
        if not (folder / path).exists():
            out.append(target)
    return out


def test_every_relative_link_of_the_readme_resolves():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert LINK.search(readme), "the README links to its docs pages"
    assert broken_links(readme, ROOT) == []


def test_a_broken_readme_link_is_found(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# a\n")
    text = "[ok](docs/a.md) [anchor](docs/a.md#x) [gone](docs/b.md) [web](https://example.org) [self](#top) `[code](nope.md)`"
    assert broken_links(text, tmp_path) == ["docs/b.md"]


# ---- the site ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_the_site_builds_strictly_and_offline(tmp_path, monkeypatch):
    """`mkdocs build --strict` in-process with every socket refused: no warning, no network attempt,
    and no page loads a script, style sheet or font from elsewhere."""
    from mkdocs.commands.build import build
    from mkdocs.config import load_config

    attempts: list[object] = []

    def refuse(*args, **kwargs):
        attempts.append(args[1:] if args else kwargs)
        raise OSError("network refused by the test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setenv("NO_MKDOCS_2_WARNING", "1")
    monkeypatch.chdir(ROOT)
    site = tmp_path / "site"
    build(load_config(str(ROOT / "mkdocs.yml"), strict=True, site_dir=str(site)))
    assert attempts == []
    pages = list(site.rglob("*.html"))
    assert (site / "reference" / "sweep-fields" / "index.html").is_file() and len(pages) > 15
    external = re.compile(r"""<(?:script|img|iframe)[^>]*\ssrc=["']?(?:https?:)?//|<link[^>]*\shref=["']?(?:https?:)?//""")
    for page in pages:
        html = page.read_text(encoding="utf-8")
        assert not external.search(html), f"{page.relative_to(site)} loads something from the web"
        assert 'class="mermaid"' not in html, f"{page.relative_to(site)}: the theme loads mermaid from the web"
    for css in site.rglob("*.css"):
        assert not re.search(r"@import|url\((?:[\"']?)(?:https?:)?//", css.read_text(encoding="utf-8")), (
            f"{css.name} fetches a font or sheet"
        )


# ---- what the docs say about the shipped sweeps ------------------------------------------------
SWEEP_NAME = re.compile(r"\b([a-z0-9_]+)\.yaml\b|\b(quickstart)\b")
NUMBER_OF = re.compile(r"\b(\d+) (trials|seeds)\b")
MINUTES = re.compile(r"(?<![\d.])(\d+)(?:[–-](\d+))? min\b")
"""Whole minutes (`18 min`, `10-18 min`); a figure with decimals (`53.1 min`) is a measurement
table's, not a claim about the sweep."""


def _claims(text: str):
    """(sentence, the one shipped sweep it names) for each sentence naming exactly one."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    shipped = {p.name for p in (ROOT / "sweeps").glob("*.yaml")}
    for sentence in re.split(r"(?<=[.;:!?])\s+|\n\s*\n|\n\|", text):
        named = {(m.group(1) + ".yaml") if m.group(1) else "quickstart.yaml" for m in SWEEP_NAME.finditer(sentence)}
        named &= shipped
        if len(named) == 1:
            yield " ".join(sentence.split()), named.pop()


def test_what_the_docs_say_about_shipped_sweeps_is_what_they_are():
    """Issue 35: sweep-files.md said the quickstart was "4 arms x 3 seeds, ~5 min" when it was 20
    trials and 10-18 min. Every sentence of the README and the docs that names one shipped sweep and
    states its trials, seeds or minutes must agree with its expansion and with the measured wall
    times (docs/shipped_sweeps.py, the one place they are kept)."""
    shipped = gen._shipped_module()
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    wrong = []
    counted: dict[str, tuple[int, int]] = {}
    for page in pages:
        for sentence, sweep in _claims(page.read_text(encoding="utf-8")):
            if sweep not in shipped.SHIPPED or "--grid" in sentence or "--set" in sentence:
                continue  # not shipped, or the sweep changed on the command line
            trials, seeds = counted.setdefault(sweep, shipped.counts(sweep))
            for n, what in NUMBER_OF.findall(sentence):
                if int(n) != {"trials": trials, "seeds": seeds}[what]:
                    wrong.append(f"{page.name}: {sweep} has {trials} trials, {seeds} seeds, not {n} {what}: {sentence[:160]}")
            measured = {int(x) for x in re.findall(r"\d+", shipped.SHIPPED[sweep][1])}
            for low, high in MINUTES.findall(sentence):
                stated = {int(low)} | ({int(high)} if high else set())
                if not stated <= measured:
                    wrong.append(
                        f"{page.name}: {sweep} was measured at {shipped.SHIPPED[sweep][1]}, not {low}{'-' + high if high else ''} min: {sentence[:160]}"
                    )
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("page", ["cluster.md", "reliability.md"])
def test_recipes_come_first_and_the_evidence_under_its_own_heading(page):
    """Issue 35: cluster.md and reliability.md read like test logs (test names, "3 of 6 runs",
    seconds on busy cores) with the recipes buried. What to do comes first; the tests and what they
    measured come after an `## Evidence` heading."""
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    heading = re.search(r"^## Evidence\b.*$", text, re.M)
    assert heading, f"{page} has no `## Evidence` section"
    recipes, evidence = text[: heading.start()], text[heading.start() :]
    markers = re.compile(r"tests/|\btest_\w+|\bmeasured\b|\b\d+ of \d+ runs\b", re.I)
    found = [line.strip()[:120] for line in recipes.splitlines() if markers.search(line)]
    assert not found, f"{page}: evidence before its heading:\n" + "\n".join(found)
    assert markers.search(evidence)
    assert heading.start() > len(text) / 4 or page == "reliability.md"  # the recipes are not a stub


def _screenshots():
    spec = importlib.util.spec_from_file_location("docs_screenshots", ROOT / "docs" / "screenshots.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_pictures_of_the_docs_are_current():
    """docs/img/ holds pictures made by docs/screenshots.py (headless Chromium on `gatesweep ui` and
    report.html, the quickstart's report plots); one whose drawing code changed since is stale."""
    shots = _screenshots()
    old = shots.stale()
    assert not old, f"stale pictures {old}; refresh them with: {shots.REFRESH}"
    for name in shots.SOURCES:
        assert f"img/{name}" in "".join(p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("*.md")), name


def test_a_stale_picture_is_found(tmp_path):
    import json
    import shutil

    shots = _screenshots()
    for name in [*shots.SOURCES, "screenshots.json"]:
        shutil.copyfile(ROOT / "docs" / "img" / name, tmp_path / name)
    assert shots.stale(tmp_path / "screenshots.json") == []
    manifest = json.loads((tmp_path / "screenshots.json").read_text())
    manifest["report-html.png"]["sources"]["dashboards/html.py"] = "0" * 64  # the report's code changed since
    (tmp_path / "screenshots.json").write_text(json.dumps(manifest))
    (tmp_path / "mlflow-runs-charts.png").write_bytes(b"not the picture")
    assert shots.stale(tmp_path / "screenshots.json") == ["mlflow-runs-charts.png", "report-html.png"]
