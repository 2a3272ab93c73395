"""The tutorial (tutorial/*.md) against the code: it fails when a chapter drifts.

Each chapter is checked by tutorial/chapters.py: every `python include=FILE:NAME` block must equal
the current source of NAME byte for byte, every `python run` snippet must run (a chapter's snippets
share a namespace, in order), every `text output` block must equal what its snippet printed, every
`bash cli` command must parse (reco_mini flags, config files, paths), and no other kind of code block
may appear. The figures script must run (fast mode), and the committed figures must be small.
"""
from __future__ import annotations

import ast
import importlib.util
import inspect
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TUTORIAL = ROOT / "tutorial"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


chapters = _load("tutorial_chapters", TUTORIAL / "chapters.py")


def test_every_chapter_and_the_readme_exist():
    for name in chapters.CHAPTERS:
        assert (TUTORIAL / name).is_file(), name
    readme = (TUTORIAL / "README.md").read_text()
    for name in chapters.CHAPTERS:
        assert name in readme, f"tutorial/README.md does not link {name}"


@pytest.mark.parametrize("name", chapters.FILES)
def test_chapter_code_matches_and_runs(name):
    report, _ = chapters.check_chapter(name)
    assert not report.errors, "\n".join(report.errors)
    assert report.includes + report.snippets + report.commands > 0, f"{name} has no checked code"


def test_whole_function_includes_equal_inspect_getsource():
    """An independent second check of the includes: inspect.getsource on the imported module (reco_mini.py and the
    modules of the package reco/ that the chapters include; tutorial/'s own files are not modules of a package)."""
    import importlib

    checked = 0
    for name in chapters.CHAPTERS:
        for block in chapters.parse_blocks((TUTORIAL / name).read_text()):
            if block.kind != "include" or "start" in block.attrs or "end" in block.attrs:
                continue
            path, _, qualname = block.attrs["include"].partition(":")
            if not path.endswith(".py") or ("/" in path and not path.startswith("reco/")):
                continue
            obj = importlib.import_module(path[:-3].replace("/", ".").removesuffix(".__init__"))
            for part in qualname.split("."):
                obj = getattr(obj, part)
            if inspect.isfunction(obj) or inspect.isclass(obj):
                assert block.body + "\n" == inspect.getsource(obj), f"{name}: {qualname}"
                checked += 1
    assert checked >= 5


DRIFTED = '''# synthetic chapter
```python include=reco_mini.py:pass_at_k
def pass_at_k(n, c, k):  # an old copy, pasted by hand
    return 1 - (1 - c / n) ** k
```
```python
print("a block nothing checks")
```
```python run
print(1 + 1)
```

```text output
3
```
```python run
raise AssertionError("a check that no longer holds")
```
```bash cli
python reco_mini.py --methods grpo,ppo
python reco_mini.py --no-such-flag
torchrun --nproc_per_node=8 -m reco_scaled.no_such_module --config reco_scaled/configs/none.yaml
```
'''


def test_checker_fails_on_every_kind_of_drift():
    report, _ = chapters.check_chapter("synthetic.md", text=DRIFTED)
    text = "\n".join(report.errors)
    assert "include reco_mini.py:pass_at_k differs from the source" in text
    assert "unchecked code block" in text
    assert "printed output differs" in text
    assert "a check that no longer holds" in text
    assert "--methods must be a comma-separated subset of" in text
    assert "unrecognized arguments: --no-such-flag" in text
    assert "module reco_scaled.no_such_module not found" in text
    assert len(report.errors) == 7


def test_an_include_that_does_not_parse_is_an_error():
    """Issue 43: a start/end range cut in the middle of a statement (an `if` without its body, a call without its
    closing bracket) fails the check, even when the body equals the source; whole statements pass."""
    cut = {"include": "reco_mini.py:train_rl", "start": "if loss_cfg.variance_norm", "end": "if loss_cfg.variance_norm"}
    whole = {"include": "reco_mini.py:train_rl", "start": "if loss_cfg.variance_norm", "end": "v_old_mean = torch.ones"}
    for attrs, parses in ((cut, False), (whole, True)):
        body = chapters.include_text(attrs)
        text = f'```python include={attrs["include"]} start="{attrs["start"]}" end="{attrs["end"]}"\n{body}\n```\n'
        report, _ = chapters.check_chapter("synthetic.md", text=text)
        assert (not report.errors) == parses, report.errors
        assert parses or "does not parse as Python" in report.errors[0]


def test_write_mode_refreshes_includes_and_outputs():
    stale = "```python include=reco_mini.py:pass_at_k\nold\n```\n```python run\nprint('fresh')\n```\n```text output\nstale\n```\n"
    _, text = chapters.check_chapter("synthetic.md", text=stale, write=True)
    report, _ = chapters.check_chapter("synthetic.md", text=text)
    assert not report.errors, report.errors
    assert "\nfresh\n" in text and "def pass_at_k(" in text


def test_figures_script_runs_and_committed_figures_are_small(tmp_path):
    make_figures = _load("tutorial_make_figures", TUTORIAL / "make_figures.py")
    written = make_figures.main(["--fast", "--out", str(tmp_path)])
    assert written and all(p.is_file() and p.stat().st_size > 1000 for p in written)
    committed = sorted((TUTORIAL / "figures").glob("*.png"))
    assert {p.name for p in written} == {p.name for p in committed}, "run python tutorial/make_figures.py"
    for p in committed:
        assert p.stat().st_size < 200_000, f"{p} is over 200 KB"
    for name in chapters.CHAPTERS:
        for link in re.findall(r"!\[[^\]]*\]\(([^)]+)\)", (TUTORIAL / name).read_text()):
            assert (TUTORIAL / link).is_file(), f"{name} links a missing figure {link}"


def test_the_reading_path_fits_its_budget():
    """The student's path (README, tutorial/README, chapters 1-5, reco_mini.py) took 4-4.5 h at 27,720 words; issue 54
    caps it at 18,000. Counted a second way here (regular expression against str.split)."""
    words = chapters.teaching_path_words()
    assert words == {name: len(re.findall(r"\S+", (ROOT / name).read_text())) for name in chapters.TEACHING_PATH}
    assert len(words) == 8 and {"README.md", "tutorial/README.md", "reco_mini.py"} <= set(words)
    table = ", ".join(f"{name} {n}" for name, n in words.items())
    assert sum(words.values()) <= chapters.WORD_BUDGET, f"{sum(words.values())} words: {table}"


def test_the_glossary_defines_the_terms_chapter_1_uses_before_defining_them():
    """REINFORCE, k3, SFT and Countdown were used in chapter 1 before any definition (issue 54)."""
    readme = (TUTORIAL / "README.md").read_text()
    assert "\n## Glossary\n" in readme
    glossary = readme.split("\n## Glossary\n", 1)[1].split("\n## ", 1)[0]
    for term in ("REINFORCE", "SFT", "k3", "Countdown", "rollout"):
        assert re.search(rf"^[-*] \*\*{term}\b[^*]*\*\*\S*\s+\S", glossary, re.M | re.I), f"no glossary entry for {term}"


@pytest.mark.parametrize("name", chapters.CHAPTERS[2:4])
def test_chapters_3_and_4_open_with_the_papers_argument_and_end_with_what_was_measured(name):
    headings = re.findall(r"^## (.+)$", (TUTORIAL / name).read_text(), re.M)
    assert headings[0] == "The paper's argument", headings
    assert headings[-1] == "Measured here" and headings.count("Measured here") == 1, headings


def test_policy_loss_is_shown_whole_once():
    """The reader met policy_loss in six slices and whole once more; the whole function is shown exactly once."""
    whole = [name for name in chapters.CHAPTERS[:5] for line in (TUTORIAL / name).read_text().splitlines()
             if re.fullmatch(r"```python include=reco_mini\.py:policy_loss\s*", line)]
    assert len(whole) == 1, whole


# ----------------------------------------------------------------- issue 59: the path says what the code does

FORM_NAMES = ("group/all", "batch/positive", "group/positive", "batch/all")


def _prose(text: str) -> str:
    """A chapter without its fenced blocks."""
    blocks = chapters.parse_blocks(text)
    lines = text.split("\n")
    drop = {i for b in blocks for i in range(b.open_line, b.close_line + 1)}
    return "\n".join(line for i, line in enumerate(lines) if i not in drop)


def _measured_box(name: str) -> str:
    return (TUTORIAL / name).read_text().split("\n## Measured here\n", 1)[1].split("\n## ", 1)[0]


@pytest.mark.parametrize("name", chapters.CHAPTERS[2:4])
def test_every_measured_here_box_names_the_form_it_measured(name):
    """Issue 59: the boxes quoted group/all, the old default, as "ReCo". Each box names a form, and every sentence of
    it that speaks of ReCo names which form."""
    box = " ".join(line.lstrip("> ") for line in _measured_box(name).splitlines())
    assert any(form in box for form in FORM_NAMES), box
    for sentence in re.split(r"(?<=[.;])\s+", box):
        if "ReCo" in sentence:
            assert any(form in sentence for form in FORM_NAMES), f"{name}: names no form: {sentence}"


def test_the_stability_table_names_each_rows_response_weights():
    """Chapter 4's stability table (results/cpu_study.json) has a `weights` column read from the study's flags: group/all
    for every ReCo run with response weights (the study predates issue 52), '-' for GRPO and the token term alone."""
    out = next(b.body for b in chapters.parse_blocks((TUTORIAL / chapters.CHAPTERS[3]).read_text())
               if b.kind == "output" and "largest rho" in b.body)
    header, *rows = out.splitlines()
    assert header.split()[0] == "weights"
    forms = {row.split()[0]: row.split()[1] for row in rows if not row.startswith("largest")}
    assert forms["grpo"] == forms["reco-token"] == "-"
    assert forms["reco"] == "group/all" and forms["reco+apply-positive"] == "group/positive"


def test_the_toy_runs_batch_positive_beside_the_default_and_the_prose_quotes_its_numbers():
    """Chapter 3's shared-logits toy, recomputed from tutorial/toys/shared_modes.py: batch/positive keeps Pass@256 that
    GRPO and group/all lose, at a lower Pass@1, by moving the update off easy groups; every number the prose quotes
    for it is the toy's."""
    toy = _load("tutorial_toy_shared_modes", TUTORIAL / "toys" / "shared_modes.py")
    assert toy.FORMS["ReCo group/all"][1:] == ("all", "group")
    assert toy.FORMS["ReCo batch/positive"][1:] == ("positive", "batch")
    import reco_mini

    # the default again since the replication study (issue 59's rule)
    assert (reco_mini.LossConfig.occurrence_apply, reco_mini.LossConfig.occurrence_norm) == ("all", "group")
    end = {name: toy.train(True, 100, occ, apply=apply, norm=norm)[-1] for name, (occ, apply, norm) in toy.FORMS.items()}
    grpo, old, new = end["GRPO"], end["ReCo group/all"], end["ReCo batch/positive"]
    p256 = {k: toy.exact_pass_at_k(v, 256) for k, v in end.items()}
    assert p256["ReCo batch/positive"] > max(p256["GRPO"], p256["ReCo group/all"])
    assert toy.exact_pass_at_k(new, 1) < toy.exact_pass_at_k(grpo, 1)
    assert new["update_share_easy"] < min(grpo["update_share_easy"], old["update_share_easy"])
    import torch

    pi = torch.tensor(toy.SFT_FORM_PRIOR, dtype=torch.float64)
    w = reco_mini.occurrence_weights(pi.log()[torch.tensor([[0, 3, 1, 1, 2, 2, 4, 4]])], "sequence",
                                     advantages=torch.ones(1, 8), apply="positive", norm="batch",
                                     batch_mean=toy.expected_inv_m(toy.SFT_FORM_PRIOR, 8, "sequence"))
    quoted = [p256["GRPO"], p256["ReCo group/all"], p256["ReCo batch/positive"], toy.exact_pass_at_k(new, 1),
              toy.exact_pass_at_k(grpo, 1), new["update_share_easy"], grpo["update_share_easy"], w[0, 0], w[0, 1]]
    prose = _prose((TUTORIAL / chapters.CHAPTERS[2]).read_text())
    start = prose.index("With shared logits, every update")
    toy_paragraph = prose[start:prose.index("\n\n", start)]
    for x in quoted:
        assert f"{float(x):.3f}" in toy_paragraph, f"chapter 3 does not quote the toy's {float(x):.3f}"


def _norm_study() -> dict:
    study = json.loads((ROOT / "results" / "norm_study.json").read_text())
    return {c["name"]: c for c in study["family"] + study["secondary"]} | {"arms": study["arms"]}


def _fmt(x: float) -> str:
    return f"{x:+.3f}".replace("-", "−") if abs(x) >= 0.0005 else f"{'−' if x < 0 else '+'}0.000"


def test_chapter_5_closes_the_story_with_the_findings():
    """Issue 59: chapter 5 ended with log fields, and said the pre-registered comparison 'did not confirm ReCo's claim'
    where chapter 3 said the default was confirmed. It now closes with what was found (numbers from
    results/norm_study.json), what it means at the paper's scale, and what to try next."""
    text = (TUTORIAL / chapters.CHAPTERS[4]).read_text()
    headings = re.findall(r"^## (.+)$", text, re.M)
    assert headings[-1] == "What was found, and what to try next", headings
    closing = text.split("\n## What was found, and what to try next\n", 1)[1]
    assert "did not confirm ReCo's claim" not in text
    for link in ("../docs/findings.md", "../docs/replication_study.md"):
        assert f"]({link})" in closing, link
    for phrase in ("GRPO concentrates", "F-GRPO", "Pass@k training", "group/all", "batch/positive", "inert",
                   "occurrence: count", "95% CI", "matched Pass@1"):
        assert phrase in closing, phrase
    study = _norm_study()
    for name in ("reco-positive-batch - grpo @ 0.0001", "reco-positive-batch - grpo @ 0.0002"):
        c = study[name]
        assert f"{_fmt(c['mean'])} ({_fmt(c['ci_low'])} to {_fmt(c['ci_high'])},\nHolm p {c['p_holm']:.3f})".replace(
            "\n", " ") in " ".join(closing.split()), name
        fp1 = c["final_pass_at_1"]
        assert f"{_fmt(fp1['mean'])} ({_fmt(fp1['ci_low'])} to {_fmt(fp1['ci_high'])})" in " ".join(closing.split()), name
    c = study["reco-positive-batch - f-grpo @ 0.0001"]
    assert f"{_fmt(c['mean'])} ({_fmt(c['ci_low'])} to {_fmt(c['ci_high'])})" in closing
    assert f"{-c['final_pass_at_1']['mean']:.3f} higher" in closing
    easy = {arm: study["arms"][f"{arm}@0.0001"]["shares"]["update_share_easy"]["mean"] for arm in ("reco-positive-batch", "grpo")}
    flat = " ".join(closing.split())
    assert f"{easy['reco-positive-batch']:.3f} under batch/positive against GRPO's {easy['grpo']:.3f}" in flat
    import yaml

    for config in sorted((ROOT / "reco_scaled" / "configs").glob("*-reco.yaml")):
        assert yaml.safe_load(config.read_text())["algo"]["occurrence"] == "count", config.name


def test_chapter_3_quotes_the_normalisation_study_with_its_statistic():
    box = " ".join(line.lstrip("> ") for line in _measured_box(chapters.CHAPTERS[2]).splitlines())
    assert "matched Pass@1" in box and "95% CI" in box
    study = _norm_study()
    for name in ("reco-positive-batch - grpo @ 0.0001", "reco-positive-batch - grpo @ 0.0002"):
        c = study[name]
        assert f"{_fmt(c['mean'])} ({_fmt(c['ci_low'])} to {_fmt(c['ci_high'])})" in box, name


def test_the_glossary_defines_the_studies_terms_before_their_first_use():
    """F-GRPO, Pass@k training, matched Pass@1 and pre-registered were used before any definition (issue 59). On the path
    from tutorial/README.md through chapter 5, each first appears in its glossary entry."""
    readme = (TUTORIAL / "README.md").read_text()
    path = readme + "".join((TUTORIAL / name).read_text() for name in chapters.CHAPTERS[:5])
    glossary_at = readme.index("\n## Glossary\n")
    glossary = readme[glossary_at:].split("\n## ", 2)[1]
    for term in ("F-GRPO", "Pass@k training", "matched Pass@1", "pre-registered", "group/all", "batch/positive"):
        entry = re.search(rf"^- \*\*[^*]*{re.escape(term)}[^*]*\*\*: .+?(?=^- |\Z)", glossary, re.M | re.S | re.I)
        assert entry, f"no glossary entry for {term}"
        first = path.lower().index(term.lower())
        start = glossary_at + 1 + len("## ") + glossary.index(entry.group(0))
        assert start <= first < start + len(entry.group(0)), f"{term} is used before its glossary entry"


def test_chapter_6_says_batch_normalisation_all_reduces_the_weights():
    """ch6 said the response weights need no communication; under occurrence_norm batch reco_scaled all-reduces the mean
    of 1/m_i (reco_scaled/trainer.py response_weights), under the default, group, they need none."""
    from reco_scaled import trainer

    assert "all_sum" in inspect.getsource(trainer.response_weights)
    text = " ".join((TUTORIAL / chapters.CHAPTERS[5]).read_text().split())
    for sentence in re.split(r"(?<=\.)\s+", text):
        assert not ("response weights" in sentence and "no communication" in sentence), sentence
    assert re.search(r"default `occurrence_norm: group`[^.]*response weights are computed per group", text)
    assert re.search(r"Under `occurrence_norm: batch` they need one number[^.]*all-reduces", text)
    assert "all_reduce(sum of 1/m_i)" in text


def _occurrence_weights_calls():
    """Every call of occurrence_weights in the toys, the figures script and the chapters' snippets."""
    sources = [(p.name, p.read_text()) for p in [*sorted((TUTORIAL / "toys").glob("*.py")), TUTORIAL / "make_figures.py"]]
    sources += [(name, b.body) for name in chapters.CHAPTERS for b in chapters.parse_blocks((TUTORIAL / name).read_text())
                if b.kind == "run"]
    for where, source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "occurrence_weights":
                yield where, node


def test_every_tutorial_call_of_occurrence_weights_names_its_form():
    """occurrence_weights' keyword defaults are LossConfig's (issue 59), which a study may move again: every call names
    its form, and one that reweights only A > 0 must pass the advantages."""
    calls = list(_occurrence_weights_calls())
    assert len(calls) >= 6
    for where, call in calls:
        kw = {k.arg: k.value for k in call.keywords}
        assert len(call.args) >= 2 or "mode" in kw, f"{where}:{call.lineno}: no occurrence mode"
        assert {"apply", "norm"} <= set(kw), f"{where}:{call.lineno}: pass apply= and norm= explicitly"
        if not (isinstance(kw["apply"], ast.Constant) and kw["apply"].value == "all"):
            assert "advantages" in kw, f"{where}:{call.lineno}: apply may be 'positive': pass advantages="


def test_the_path_answers_how_to_run_my_own_model_and_data_on_one_gpu():
    """Question (f): one command and the data format, on the path (tutorial/README.md), checked against the code."""
    from reco.data.math import ANSWER_FIELDS, PROBLEM_FIELDS

    readme = (TUTORIAL / "README.md").read_text()
    commands = [line for b in chapters.parse_blocks(readme) if b.kind == "cli" for line in b.body.splitlines()
                if "--task math" in line]
    assert len(commands) == 1 and "--model" in commands[0] and "--data" in commands[0]
    assert chapters.check_command(commands[0]) is None
    example = re.search(r'`(\{"question": [^`]+\})`', readme)
    row = json.loads(example.group(1))
    assert set(row) & set(PROBLEM_FIELDS) and set(row) & set(ANSWER_FIELDS)


def test_chapter_5_says_the_default_did_not_replicate_with_the_studys_numbers():
    """The replication study (issue 59) confirmed batch/positive at neither lr, so the default went back to group/all:
    ch5's closing says so, and quotes the primary contrasts from results/replication_study.json."""
    study = json.loads((ROOT / "results" / "replication_study.json").read_text())
    assert not study["partial"] and not study["default"]["stays"]
    text = (TUTORIAL / chapters.CHAPTERS[4]).read_text()
    closing = " ".join(text.split("\n## What was found, and what to try next\n", 1)[1].split())
    assert "It did not replicate." in closing and "the default went back to group/all" in closing
    for row in study["family"]:
        assert f"{_fmt(row['mean'])} ({_fmt(row['ci_low'])} to {_fmt(row['ci_high'])})" in closing, row["name"]
        assert f"Holm p {row['p_holm']:.3f}" in closing, row["name"]
