"""The README's headline findings, written from the committed results JSON, never typed.

It reuses the studies' own generated sentences: the exploratory CPU study's concentration claim
(experiments/cpu_study.py `claims`), the frontier study's tested hypotheses (experiments/frontier_study.py
`claims`), labelled exploratory, the whole-trajectory re-analysis of that study (experiments/protocol.py
`verdict`), and the long-response study's hypotheses (experiments/long_study.py `claims`), or how far it has run.
tests/test_docs.py checks that the README's block is what this renders from the committed files.

  python experiments/headline.py --write README.md
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cpu_study  # noqa: E402
import frontier_study  # noqa: E402
import long_study  # noqa: E402
import protocol  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- headline:begin -->", "<!-- headline:end -->"
FRONTIER, CPU, REANALYSIS = "results/frontier_study.json", "results/cpu_study.json", "results/frontier_reanalysis.json"
LONG, FORK = "results/long_study.json", "results/fork_study.json"
SOURCES = (FRONTIER, CPU, REANALYSIS, LONG)  # FORK joins them once the fork study has written its summary


def trajectory_sentences(reanalysis: dict) -> list[str]:
    """One sentence per comparison: the mean Pass@k gap over the Pass@1 range both runs' checkpoints cover."""
    out = []
    for name, c in reanalysis["comparisons"].items():
        p = c["primary"]
        out.append(f"{name}: {p['mean']:+.3f} (95% CI {p['ci_low']:+.3f}, {p['ci_high']:+.3f}), n = {p['n']}: "
                   f"{protocol.verdict(p)}")
    return out


def long_study_lines(long: dict) -> list[str]:
    """The long-response study's hypotheses, each read by its rule; while it runs, only how far it is."""
    head = ("- Pre-registered long-response study (countdown-long, where exact duplicates vanish; "
            "[docs/long_study.md](docs/long_study.md))")
    if long["partial"]:
        return [f"{head}: **partial**, {long['compute']['runs']} of {long['compute']['runs_planned']} runs; no finding is "
                "drawn from it until it finishes."]
    k = long["design"]["k"]
    return [f"{head}: {len(long['design']['confirm_seeds'])} seeds per arm, paired with GRPO; H2-H3 read the mean "
            f"Pass@{k} gap over the Pass@1 range both runs cover, H4 the fork tokens' share of the update; H2-H4 "
            "Holm-corrected:", *[f"  - {claim}" for claim in long_study.claims(long)]]


def fork_study_lines(fork: dict | None) -> list[str]:
    """The fork study's paragraph: nothing before its first summary, how far it is while it runs, then its hypotheses,
    the detector's verdict and the stall counts, each read by its rule."""
    if fork is None:
        return []
    import fork_study  # here, not at the top: importing it registers the fork arms in reco_mini
    head = "- Pre-registered fork study (countdown-long; [docs/fork_study.md](docs/fork_study.md))"
    if fork["partial"]:
        return [f"{head}: **partial**, {fork['compute']['runs']} of {fork['compute']['runs_planned']} runs; no finding is "
                "drawn from it until it finishes."]
    stalls = ", ".join(f"{a} {s['stalled']}/{s['runs']}" for a, s in fork["stalls"].items())
    return [f"{head}: {len(fork['design']['confirm_seeds'])} seeds per arm, paired by seed; Holm-corrected:",
            *[f"  - {claim}" for claim in fork_study.claims(fork)],
            f"  - {fork_study.detector_lines(fork)[-1].strip()}", f"  - Stalled runs per arm: {stalls}."]


def sources() -> tuple[list[dict], dict | None]:
    """The committed summaries render takes: SOURCES, and the fork study's where it exists."""
    fork = ROOT / FORK
    return [json.loads((ROOT / path).read_text()) for path in SOURCES], json.loads(fork.read_text()) if fork.exists() else None


def render(frontier: dict, cpu: dict, reanalysis: dict, long: dict, fork: dict | None = None) -> str:
    """The block: the concentration sentence, the tested hypotheses, the frontier plot and where the rest is."""
    design, hypotheses = frontier["design"], frontier["hypotheses"]
    concentration = next(c for c in cpu_study.claims(cpu) if c.startswith("**Concentration.**"))
    tested = frontier_study.claims(frontier)[: len(hypotheses)]
    return "\n".join([
        f"_Generated from `{FRONTIER}`, `{REANALYSIS}`, `{CPU}`{'' if fork is None else f', `{FORK}`'} and `{LONG}` by "
        "`python experiments/headline.py --write README.md`; "
        "rerun it rather than editing._",
        "",
        f"- Exploratory study ({len(cpu['study']['seeds'])} "
        f"seeds, one shared learning rate): {concentration.removeprefix('**Concentration.** ')}",
        f"- Pre-registered frontier study ({len(design['confirm_seeds'])} fresh seeds, each method at the setting chosen "
        f"on the validation split, compared at matched Pass@1; Holm-corrected):",
        *[f"  - {sentence}" for sentence in tested],
        f"- Exploratory, added after the fact: the same runs read along their whole trajectories (Pass@{reanalysis['k']} "
        "gap to GRPO averaged over the Pass@1 range that both runs' measured checkpoints cover; docs/results.md):",
        *[f"  - {sentence}" for sentence in trajectory_sentences(reanalysis)],
        *long_study_lines(long),
        *fork_study_lines(fork),
        "",
        "![The matched frontier and the training trajectories](results/frontier_study.png)",
    ])


def write(path: Path, block: str) -> None:
    text = path.read_text()
    if BEGIN not in text or END not in text:
        raise SystemExit(f"error: {path} has no {BEGIN} ... {END} markers")
    head, rest = text.split(BEGIN, 1)
    path.write_text(head + BEGIN + "\n" + block + "\n" + END + rest.split(END, 1)[1])


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", type=Path, help="page to fill between the headline markers (README.md)")
    args = parser.parse_args(argv)
    required, fork = sources()
    block = render(*required, fork=fork)
    if args.write:
        write(args.write, block)
    else:
        print(block)
    return block


if __name__ == "__main__":  # a missing or malformed results file, a page without markers: one line, exit code 2
    import reco_io

    reco_io.run_entry_point("headline.py", main, (json.JSONDecodeError, FileNotFoundError))
