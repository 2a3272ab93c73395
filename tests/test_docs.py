"""docs/design.md against the files that cite it.

The code, tests, tutorial and README cite the design document by section number, preferably as
"docs/design.md §2" (reco_mini.py, which a newcomer reads first, uses no other form), and also in these forms:

    docs/design.md section 3.2        docs/design.md sections 3.6 and 6        `docs/design.md` §4
    (design 2)        design 3.2, 3.4        docs/design.md §3.3–3.4        `docs/design.md` §3.4 and §3.6

Every cited section must exist as a numbered heading of docs/design.md ("## 3. ...", "### 3.2 ..."), and so
must every "section N" or "§N" that docs/design.md cites of itself. No file may cite a design file that is not
in the repository: a path ending in design.md (any case) must exist, and the old spec's name, DESIGN (in
capitals, with or without .md), is allowed only if a DESIGN.md exists at the root. The checker is tested on
synthetic files first, so that a passing run on the repository means something.
"""
from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DESIGN = ROOT / "docs" / "design.md"
SELF = Path(__file__).resolve().relative_to(ROOT).as_posix()  # its docstring and synthetic cases cite on purpose

NUM = r"\d+(?:\.\d+)*"
LIST = rf"(?:§\s*)?{NUM}(?:\s*(?:,|and|or|to|–|-)\s*(?:§\s*)?{NUM})*"
# A citation from another file: anchored to the path, or to the word "design" directly followed by a number.
CITE = re.compile(rf"(?:docs/design\.md`?\s*(?:sections?\s+|§\s*)|\bdesign\s+(?:sections?\s+|§\s*)?)({LIST})")
# Inside docs/design.md itself: "section 3.6", "sections 3.2 and 5", "§7".
SELF_CITE = re.compile(rf"(?:\bsections?\s+|§\s*)({LIST})")
HEADING = re.compile(rf"^#{{1,6}}\s+({NUM})\.?\s", re.M)
DESIGN_FILE = re.compile(r"[\w./-]*\b(?i:design)\.md\b")
OLD_NAME = re.compile(r"\bDESIGN\b")


def sections(design_text: str) -> set[str]:
    """The numbers of docs/design.md's headings: {"1", "3", "3.1", ...}."""
    return set(HEADING.findall(design_text))


def cited(text: str, pattern: re.Pattern = CITE) -> list[tuple[int, str]]:
    """(line number, section) of every section a text cites; a list or range gives each of its numbers."""
    out = []
    for m in pattern.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        out += [(line, n) for n in re.findall(NUM, m.group(1))]
    return out


def problems(files: dict[str, str], heads: set[str], exists: Callable[[str, str], bool],
             design_name: str = "docs/design.md") -> list[str]:
    """Every dangling citation in `files` (path -> text), as 'path:line: why'.

    heads: the section numbers of the design document; exists(reference, citing path): whether a
    referenced design file is in the repository.
    """
    out = []
    for path, text in sorted(files.items()):
        refs = cited(text, SELF_CITE if path == design_name else CITE)
        out += [f"{path}:{line}: cites section {n} of {design_name}, which has no such heading"
                for line, n in refs if n not in heads]
        lines = text.split("\n")
        for i, line in enumerate(lines, 1):
            missing = [m for m in DESIGN_FILE.findall(line) if not exists(m, path)]
            if OLD_NAME.search(DESIGN_FILE.sub("", line)) and not exists("DESIGN.md", ""):
                missing.append("DESIGN")  # the old name without .md: "DESIGN §2"
            out += [f"{path}:{i}: cites {m}, which is not in the repository (cite {design_name} instead)"
                    for m in dict.fromkeys(missing)]
    return out


def in_repository(reference: str, citing: str) -> bool:
    """A design-file reference resolves from the repository root, or from the citing file's folder."""
    ref = reference.removeprefix("./")
    return bool(ref) and ((ROOT / ref).is_file() or (ROOT / citing).parent.joinpath(ref).is_file())


def repository_texts() -> dict[str, str]:
    """Every text file of the checkout (tracked, or new and not ignored), but this test file."""
    try:
        names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                               text=True, check=True).stdout.split("\n")
    except (OSError, subprocess.CalledProcessError):  # no git: walk the tree
        skip = ("runs", ".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache")
        names = [p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*")
                 if p.is_file() and not any(part.startswith(skip) for part in p.relative_to(ROOT).parts)]
    out = {}
    for name in filter(None, names):
        path = ROOT / name
        if name == SELF or not path.is_file() or path.stat().st_size > 2_000_000:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:  # images and other binary files
            continue
        if "\0" not in text:
            out[name] = text
    return out


# ------------------------------------------------------------------------------------------ the checker itself

def test_the_checker_finds_every_kind_of_dangling_reference():
    heads = {"1", "3", "3.2", "3.3", "3.4", "3.5", "4", "6"}
    files = {
        "good.py": "see docs/design.md section 3.2 and (design 3.5); design 3.2, 3.4 and `docs/design.md` §4",
        "range.md": "`docs/design.md` §3.3–3.4 and §6; docs/design.md sections 3.5 and 6; design notes say so",
        "missing.py": '"""The loss (docs/design.md section 3.7)."""\n# RL loop (design 9)',
        "list.md": "`docs/design.md` §3.4 and §5",
        "old.py": "# per DESIGN.md §2\n# see DESIGN section 3.6",
        "path.md": "[notes](../notes/design.md) and ./Design.md",
        "docs/design.md": "## 1. Layout\n## 3. Math\n### 3.2 Response\nAs section 3.2 says, and §8 does not.\n",
    }
    on_disk = {"docs/design.md"}
    found = problems(files, heads, lambda ref, citing: ref.removeprefix("./") in on_disk)
    text = "\n".join(found)
    assert "missing.py:1: cites section 3.7" in text and "missing.py:2: cites section 9" in text
    assert "list.md:1: cites section 5 " in text
    assert "old.py:1: cites DESIGN.md" in text and "old.py:2: cites DESIGN," in text
    assert "path.md:1: cites ../notes/design.md" in text and "path.md:1: cites ./Design.md" in text
    assert "docs/design.md:4: cites section 8 " in text
    assert not any(p.startswith(("good.py", "range.md")) for p in found), found
    assert len(found) == 8, found


def test_the_checker_reads_lists_and_ranges():
    assert [n for _, n in cited("docs/design.md sections 3.6 and 6.")] == ["3.6", "6"]
    assert [n for _, n in cited("(`docs/design.md` §3.3–3.4)")] == ["3.3", "3.4"]
    assert [n for _, n in cited("design 3.2, 3.4) and design §6")] == ["3.2", "3.4", "6"]
    assert cited("the design notes record it; a redesign 2 weeks later") == []
    assert sections("# reco\n## 1. Layout\n### 3.2 Response level\n#### 6.1 Launch\n## Not numbered\n") == {"1", "3.2", "6.1"}


def test_an_existing_DESIGN_md_is_allowed():
    found = problems({"a.py": "# see DESIGN.md section 2"}, {"2"}, lambda ref, citing: True)
    assert found == []


# ------------------------------------------------------------------------------------------ the repository

def test_design_document_has_the_sections_the_code_relies_on():
    heads = sections(DESIGN.read_text())
    want = {str(n) for n in range(1, 9)} | {f"3.{n}" for n in range(1, 7)}
    assert want <= heads, f"docs/design.md lacks sections {sorted(want - heads)}"


def test_every_cited_section_exists_and_no_design_file_is_missing():
    files = repository_texts()
    assert "docs/design.md" in files and "reco_mini.py" in files
    assert cited(files["reco_mini.py"]), "reco_mini.py cites no section: the citation pattern has drifted"
    found = problems(files, sections(DESIGN.read_text()), in_repository)
    assert not found, "dangling design references:\n" + "\n".join(found)


def test_reco_mini_cites_the_design_by_path_and_section_sign():
    """Issue 43: reco_mini.py's citations read "docs/design.md §2", never a cryptic "(design 2)"."""
    text = (ROOT / "reco_mini.py").read_text()
    forms = [m.group(0) for m in CITE.finditer(text)]
    assert forms and all(re.fullmatch(rf"docs/design\.md §{NUM}", f) for f in forms), forms


def test_paths_named_in_the_design_document_exist():
    """Repository paths in backticks (a folder/ or file path, or a root module reco_*.py) must exist."""
    names = re.findall(r"`((?:[\w.-]+/)+[\w.-]*|reco_\w+\.py)`", DESIGN.read_text())
    repo_dirs = ("reco/", "reco_scaled/", "tests/", "tutorial/", "experiments/", "results/", "benchmarks/", "docs/", ".ci/")
    checked = [n for n in dict.fromkeys(names) if n.startswith(repo_dirs) or "/" not in n]
    missing = [n for n in checked if not (ROOT / n).exists()]
    assert len(checked) > 20 and not missing, f"docs/design.md names paths that do not exist: {missing}"


# ------------------------------------------------------------------------------------------ links between documents

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")  # [text](target) and ![alt](target)
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
README = ROOT / "README.md"
PAGES = ("docs/design.md", "docs/results.md", "docs/reproducing.md", "docs/performance.md", "docs/one_gpu.md",
         "docs/verl.md", "docs/trl.md", "docs/reco_scaled.md", "docs/code_tasks.md", "docs/reco_mini.md", "docs/testing.md",
         "tutorial/README.md", "CONTRIBUTING.md")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (not - or _), spaces to hyphens."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """The anchors of a Markdown file's headings (outside code blocks); a repeated heading gets -1, -2, ..."""
    out, seen = set(), {}
    for m in re.finditer(r"^#{1,6}\s+(.+?)\s*$", FENCE.sub("", markdown), re.M):
        base = slug(m.group(1))
        out.add(base if base not in seen else f"{base}-{seen[base]}")
        seen[base] = seen.get(base, 0) + 1
    return out


def broken_links(files: dict[str, str], exists: Callable[[str], bool], read: Callable[[str], str]) -> list[str]:
    """'path:line: why' for every relative link (outside code blocks) whose file or heading anchor is missing.

    files: repository path -> Markdown text; exists/read take a repository path.
    """
    out = []
    for path, text in sorted(files.items()):
        prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text)
        for m in LINK.finditer(prose):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):  # https:, mailto: ...
                continue
            line = prose.count("\n", 0, m.start()) + 1
            name, _, anchor = target.partition("#")
            if name.startswith("/"):
                out.append(f"{path}:{line}: {target} is absolute; links must be relative")
                continue
            resolved = os.path.normpath(os.path.join(os.path.dirname(path), name)) if name else path
            if not exists(resolved):
                out.append(f"{path}:{line}: {target} does not exist ({resolved})")
            elif anchor and resolved.endswith(".md") and anchor not in anchors(read(resolved)):
                out.append(f"{path}:{line}: {target}: {resolved} has no heading with anchor #{anchor}")
    return out


def test_the_link_checker_finds_missing_files_and_anchors():
    files = {"README.md": "[a](docs/a.md) [b](docs/b.md) ![p](results/p.png) [s](#setup) [x](#nowhere)\n"
                          "## Setup\n```\n[c](in/code.md)\n```\n[web](https://example.org) [abs](/etc/passwd)",
             "docs/a.md": "# A\n## The default run (`python reco_mini.py`)\n[back](../README.md#setup) "
                          "[here](#the-default-run-python-reco_minipy) [bad](../README.md#set-up) [r](../results/q.png)"}
    on_disk = {"README.md", "docs/a.md", "results/p.png"}
    found = broken_links(files, on_disk.__contains__, lambda p: files[p])
    text = "\n".join(found)
    assert "README.md:1: docs/b.md does not exist" in text and "README.md:1: #nowhere: README.md has no heading" in text
    assert "README.md:6: /etc/passwd is absolute" in text
    assert "docs/a.md:3: ../README.md#set-up: README.md has no heading" in text
    assert "docs/a.md:3: ../results/q.png does not exist (results/q.png)" in text
    assert len(found) == 5, found  # the code block, the web link and the good anchors pass


def test_slugs_follow_github():
    assert slug("The frontier study: ReCo against GRPO at matched training progress") == \
        "the-frontier-study-reco-against-grpo-at-matched-training-progress"
    assert slug("Read and run `reco_mini.py`, with the tutorial") == "read-and-run-reco_minipy-with-the-tutorial"
    assert anchors("# A\n## Notes\n## Notes\n```\n# not a heading\n```") == {"a", "notes", "notes-1"}


def test_every_link_in_the_documents_resolves():
    """README, CONTRIBUTING, docs/ and tutorial/: every relative link, and every #anchor, exists."""
    files = {p: t for p, t in repository_texts().items() if p.endswith(".md") and not p.startswith(("runs/", "data/"))}
    assert "README.md" in files and "docs/results.md" in files
    found = broken_links(files, lambda p: (ROOT / p).exists(), lambda p: (ROOT / p).read_text())
    assert not found, "broken links:\n" + "\n".join(found)


def test_readme_links_every_page_a_user_needs():
    links = {os.path.normpath(m) for m in LINK.findall(README.read_text())}
    missing = [p for p in PAGES if p not in links]
    assert not missing, f"README.md does not link {missing}"


def test_the_readme_file_table_names_paths_that_exist():
    """Issue 54: the Files table describes the house as it is (the flat modules moved into reco/)."""
    table = README.read_text().split("## Files", 1)[1].split("\n## ", 1)[0]
    named = [p for row in table.splitlines() if row.startswith("| `") for p in re.findall(r"`([\w./-]+)`", row.split(" | ")[0])]
    assert len(named) > 15 and "reco/tasks/" in named, named
    missing = [p for p in named if not (ROOT / p).exists()]
    assert not missing, f"README.md's Files table names paths that do not exist: {missing}"


def test_readme_is_a_front_door():
    """At most 200 lines (issue 54); the first code block is the quick start; the test command is the one CI runs."""
    text = README.read_text()
    assert len(text.splitlines()) <= 200, f"README.md has {len(text.splitlines())} lines"
    first = re.search(r"^```bash\n(.*?)^```", text, re.M | re.S).group(1)
    commands = [line.split("#")[0].strip() for line in first.splitlines()]
    assert commands == ["pip install -r requirements.txt && python reco_mini.py", "python -m pytest -q"]
    ci = (ROOT / ".ci" / "run").read_text().strip().splitlines()
    assert ci[-1] == "python -m pytest -q"
    order = ["## What it found so far", "## Quick start", "### Read and run `reco_mini.py`", "### `reco_scaled` under torchrun",
             "### ReCo from TRL", "### ReCo from verl", "### Reproducing the paper", "## Files", "## Tests"]
    assert [text.index(h) for h in order] == sorted(text.index(h) for h in order)


def test_readme_findings_are_generated_from_the_committed_results():
    import sys

    sys.path.insert(0, str(ROOT / "experiments"))
    import headline

    text = README.read_text()
    block = text.split(headline.BEGIN, 1)[1].split(headline.END, 1)[0]
    required, optional = headline.sources()
    want = headline.render_readme(*required, **optional)
    assert block.strip() == want.strip(), "rerun: python experiments/headline.py --write README.md"
    results = (ROOT / "docs" / "results.md").read_text()
    summary = results.split(headline.FINDINGS_BEGIN, 1)[1].split(headline.FINDINGS_END, 1)[0]
    want = headline.render(*required, **optional)
    assert summary.strip() == want.strip(), "rerun: python experiments/headline.py --write docs/results.md"
    outside = headline.BEGIN.join([text.split(headline.BEGIN)[0], text.split(headline.END)[1]])
    # measured values are decimals: none may be typed outside the block (model names and the arXiv id are not values)
    typed = re.findall(r"(?<![\w.-])(?<!arXiv )[0-9]+\.[0-9]+(?![\w.])", FENCE.sub("", outside))
    assert not typed, f"README.md has typed decimal numbers outside generated blocks: {typed}"


def test_the_readme_first_screen_is_the_project_not_its_statistics():
    """Issue 43: the first 40 lines say what the project is, how to start and the ways to use it; issue 54: the findings
    are one sentence there, with no hypothesis labels, no test names and none of the studies' statistics."""
    first = "\n".join(README.read_text().splitlines()[:40])
    assert "## Quick start" in first and "pip install -r requirements.txt" in first and "docs/results.md" in first
    assert not re.search(r"\bH[1-9]\b|Holm|\bF1\b|\btest_\w+|tests/\w", first), "statistics or test names on the first screen"
    block = first.split("<!-- headline:begin -->", 1)[1].split("<!-- headline:end -->", 1)[0]
    sentences = block.split("\n", 2)[2].strip()  # after the generated-from line
    assert len(re.findall(r"[.!?](?:\s|$)", sentences)) == 1, sentences


def test_the_readme_sentence_follows_the_verdicts_and_says_partial():
    """Issue 54's one sentence: its counts follow the comparisons, the positive controls follow the control study, a
    partial normalisation study says PARTIAL, and a finished one reads its DEFAULT_RULE."""
    import copy
    import json
    import sys

    sys.path.insert(0, str(ROOT / "experiments"))
    import headline

    required, optional = headline.sources()
    frontier, cpu, long = required
    said = headline.readme_sentence(*required, **optional)
    rows = headline.coverage_comparisons(frontier, long, optional["fork"])
    assert f"in {sum(v == 'more' for _, v in rows)} of {len(rows)} pre-registered comparisons" in said
    assert "kept more at GRPO's learning rate (2e-4; about half as much at 5e-5)" in said  # issue 52's correction
    flipped = copy.deepcopy(cpu)
    flipped["paired_differences"]["base - grpo"]["pass_at_k"][str(cpu["ks"][-1])] |= {"mean": -0.3, "ci95": 0.1}
    assert "did not lose coverage" in headline.readme_sentence(frontier, flipped, long, **optional)
    none = optional | {"control": {"partial": False, "positive_controls": [], "family": [], "design": {"arms_run": []}}}
    assert "no method with published coverage gains kept more" in headline.readme_sentence(*required, **none)
    family = [{"arm": a, "reference": r, "lr": lr, "confirmed": False, "final_pass_at_1": {"ci_high": 0.01}}
              for lr in (1e-4, 2e-4) for a, r in (("reco-batch", "grpo"), ("reco-positive-batch", "grpo"),
                                                  ("reco-batch", "reco"))]
    running = {"partial": True, "family": [], "default": {"confirmed_at_both_lrs": []},
               "compute": {"runs": 40, "runs_planned": 97}}
    partial = headline.readme_sentence(*required, **optional | {"norm": running})
    assert "**PARTIAL**: the normalisation study is still running" in partial and "stays per group" not in partial
    assert "norm_study.json` (PARTIAL" in headline.render_readme(*required, **optional | {"norm": running})
    assert "40 of 97 runs" in headline.render(*required, **optional | {"norm": running})
    null = running | {"partial": False, "family": family}
    assert "confirmed 0 of 6 pre-registered contrasts, so ReCo's default stays per group" in headline.readme_sentence(
        *required, **optional | {"norm": null})
    # issue 59: the default the study chose, read with its limits (robust or at the threshold, batch alone, F-GRPO)
    steady = {str(seed): 0.03 + 0.001 * seed for seed in range(8)}
    shaky = {str(seed): (0.10 if seed == 0 else 0.004) for seed in range(8)}  # one seed carries it
    for row in family:
        row |= {"per_seed": steady if row["arm"] == "reco-positive-batch" else {str(seed): 0.0 for seed in range(8)},
                "p_holm": 0.5}
    family[1] |= {"confirmed": True, "p_holm": 0.001}
    family[4] |= {"confirmed": True, "p_holm": 0.046, "per_seed": shaky}
    versus = [{"arm": "reco-positive-batch", "reference": "f-grpo", "lr": 1e-4, "mean": 0.0, "ci_low": -0.01, "ci_high": 0.01,
               "final_pass_at_1": {"mean": -0.05, "ci_low": -0.07, "ci_high": -0.03}}]
    win = null | {"family": family, "secondary": versus, "default": {"confirmed_at_both_lrs": ["reco-positive-batch"]}}
    won = headline.readme_sentence(*required, **optional | {"norm": win, "replication": None})
    assert "applied only where the advantage is positive, kept more coverage than GRPO there (robustly at 1e-4; at 2e-4 " \
           "only at the threshold, lost when any one of" in won and "Holm" not in won
    assert "batch normalisation alone did not, F-GRPO kept as much with a higher first-try success" in won
    assert "-0.050, 95% CI -0.070 to -0.030, at 1e-4" in won and "replication" not in won
    assert "only at the threshold, Holm p 0.046, lost when" in headline.render(*required, **optional | {"norm": win})
    assert "a replication on fresh seeds is running" in headline.readme_sentence(
        *required, **optional | {"norm": win, "replication": {"partial": True}})
    undone = {"partial": False, "default": {"stays": False, "confirmed_at": []},
              "family": [{"reference": "grpo", "lr": 1e-4, "mean": 0.018, "ci_low": -0.010, "ci_high": 0.046,
                          "p_holm": 0.178}]}
    sentence = headline.readme_sentence(*required, **optional | {"norm": win, "replication": undone})
    assert "the normalisation study's default, weights normalised" in sentence and "ReCo's default since" not in sentence
    assert "did not confirm it at either learning rate, so ReCo's default went back" in sentence
    assert "did not confirm it at either learning rate (+0.018, 95% CI -0.010 to +0.046, Holm p 0.178, at 1e-4), so" in \
        headline.render(*required, **optional | {"norm": win, "replication": undone})
    family[4]["per_seed"] = steady
    assert "robustly at 1e-4; robustly at 2e-4" in headline.readme_sentence(*required, **optional | {"norm": win})
    rendered = headline.render(*required, **optional | {"norm": win, "replication": None})
    assert "**Does ReCo's normalisation explain its null?** ([docs/norm_study.md](norm_study.md)): ReCo's default since" in \
        rendered and "robustly at 1e-4; robustly at 2e-4" in rendered
    assert "PARTIAL" not in won  # every other committed study has finished


def test_readme_sentences_follow_the_verdicts_and_say_partial():
    """The README's two sentences: a flipped verdict flips the words and the counts; a partial study says PARTIAL."""
    import copy
    import json
    import sys

    sys.path.insert(0, str(ROOT / "experiments"))
    import headline

    frontier, cpu, long = (json.loads((ROOT / p).read_text()) for p in headline.SOURCES)
    fork = json.loads((ROOT / headline.FORK).read_text())
    said = " ".join(headline.readme_sentences(frontier, cpu, long, fork))
    flipped = copy.deepcopy(frontier)
    for h in flipped["hypotheses"]:
        h["confirmed"] = not h["confirmed"]
    flipped_said = " ".join(headline.readme_sentences(flipped, cpu, long, fork))
    assert ("ReCo kept more coverage than GRPO" in flipped_said) != ("ReCo kept more coverage than GRPO" in said)
    rows = headline.coverage_comparisons(frontier, long, fork)
    assert f"of the {len(rows)} pre-registered comparisons" in said
    assert f"{sum(v == 'none' for _, v in rows)} no detectable difference" in said
    fork_done = copy.deepcopy(fork)
    fork_done.get("correction", {}).get("lr_matched", {})["partial"] = False
    assert "PARTIAL" not in " ".join(headline.readme_sentences(frontier, cpu, long, fork_done))
    assert "correction is partial" not in headline.generated_from(fork_done, None, "README.md")
    fork_correcting = copy.deepcopy(fork_done)
    fork_correcting["correction"]["lr_matched"]["partial"] = True
    assert "correction is partial" in headline.generated_from(fork_correcting, None, "README.md")
    assert "PARTIAL" in " ".join(headline.readme_sentences(frontier, cpu, long, fork_done, {"partial": True}))
    assert "PARTIAL" in " ".join(headline.readme_sentences(frontier, cpu, long, fork | {"partial": True}))
    control = {"partial": False, "positive_controls": [], "family": [],
               "design": {"arms_run": ["grpo", "f-grpo", "ucpo", "reco"]}}
    none_found = headline.readme_sentences(frontier, cpu, long, fork_done, control)[-1]
    assert "No tested method" in none_found and "(F-GRPO, UCPO)" in none_found and "say little" in none_found

    def confirmed(arm: str, lr: float) -> dict:  # a confirmed contrast against grpo at lr 2e-4
        return {"arm": arm, "lr": lr, "reference_lr": 2e-4, "confirmed": True}
    found = headline.readme_sentences(frontier, cpu, long, fork_done, control | {
        "positive_controls": ["ucpo"], "family": [confirmed("ucpo", 2e-4), confirmed("reco", 5e-5) | {"confirmed": False}]})
    assert ("UCPO kept more coverage than GRPO at the same first-try success and the same learning rate; ReCo did not at "
            "the same learning rate." in found[-1] and len(found) == 3)
    own = headline.readme_sentences(frontier, cpu, long, fork_done, control | {
        "positive_controls": ["reco", "ucpo"], "family": [confirmed("ucpo", 2e-4), confirmed("reco", 5e-5)]})[-1]
    assert "UCPO kept more" in own and "; ReCo did so only at a learning rate of its own" in own
    assert "ReCo did not" not in own
    only_own = headline.readme_sentences(frontier, cpu, long, fork_done, control | {
        "positive_controls": ["f-grpo", "reco"], "family": [confirmed("f-grpo", 1e-4), confirmed("reco", 5e-5)]})[-1]
    assert ("no tested method kept more coverage than GRPO at the same first-try success and the same learning rate; "
            "F-GRPO and ReCo did so only at a learning rate of their own" in only_own)
    amending = control | {"lr_matched": {"runs": 3, "runs_planned": 24, "partial": True}}
    assert "control_study.json` (PARTIAL: its amendment 2" in headline.generated_from(fork_done, amending, "README.md")
    assert "amendment 2 is still running" in headline.readme_sentences(frontier, cpu, long, fork_done, amending)[1]
    amended = amending | {"lr_matched": {"runs": 24, "runs_planned": 24, "partial": False}}
    assert "PARTIAL" not in headline.generated_from(fork_done, amended, "README.md")
    assert "PARTIAL" not in " ".join(headline.readme_sentences(frontier, cpu, long, fork_done, amended))
    assert len(headline.readme_sentences(frontier, cpu, long, fork_done, control | {"partial": True})) == 2
    code = {"partial": True, "positive_controls": [], "compute": {"runs": 0, "runs_planned": 12}}
    waiting = headline.readme_sentences(frontier, cpu, long, fork_done, control, code)
    assert "code-tiny family is still running" in waiting[1] and len(waiting) == 3
    assert "control_study_code.json` (PARTIAL" in headline.generated_from(fork_done, control, "README.md", code)
    none_on_code = headline.readme_sentences(frontier, cpu, long, fork_done, control, code | {"partial": False})
    assert "PARTIAL" not in " ".join(none_on_code) and "no tested method kept more coverage" in none_on_code[-1]
    simko = headline.readme_sentences(frontier, cpu, long, fork_done, control,
                                      code | {"partial": False, "positive_controls": ["simko"]})[-1]
    assert "code-writing task" in simko and "SimKO kept more coverage" in simko


def test_readme_findings_are_plain_words_chosen_by_rule():
    """A partial long study says so and draws nothing; a finished one reads each verdict; flipping a verdict in the
    JSON flips the sentence (the sentences follow the results, not the other way round)."""
    import copy
    import json
    import sys

    sys.path.insert(0, str(ROOT / "experiments"))
    import headline

    long = json.loads((ROOT / headline.LONG).read_text())
    partial = headline.long_study_sentence(long | {"partial": True})
    assert "**partial**" in partial and f"of {long['compute']['runs_planned']} runs" in partial and "worse" not in partial
    assert "did worse than GRPO" in headline.long_study_sentence(long | {"partial": False})

    frontier = json.loads((ROOT / headline.FRONTIER).read_text())
    flipped = copy.deepcopy(frontier)
    for h in flipped["hypotheses"]:
        h["confirmed"] = not h["confirmed"]
    said, flipped_said = " ".join(headline.frontier_sentences(frontier)), " ".join(headline.frontier_sentences(flipped))
    assert ("One variant did" in said) != ("One variant did" in flipped_said)
    assert ("did not beat GRPO's coverage" in said) != ("did not beat GRPO's coverage" in flipped_said)
    block = headline.render(*(json.loads((ROOT / p).read_text()) for p in headline.SOURCES))
    assert not re.search(r"\bH[1-4]\b|Holm|L\*|[Aa]mendment", block), "the statistics belong in docs/results.md"


def test_pages_name_only_existing_docs():
    """A docs/<page>.md named anywhere (code, tests, tutorial, configs) exists."""
    files = repository_texts()
    found = [f"{path}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}" for path, text in sorted(files.items())
             for m in re.finditer(r"\bdocs/[\w.-]+\.md\b", text) if not (ROOT / m.group(0)).is_file()]
    assert not found, "cited pages that do not exist:\n" + "\n".join(found)
