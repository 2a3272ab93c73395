"""The README's findings in plain words, written from the committed results JSON, never typed.

Each sentence is chosen by a rule on a study's verdict (a 95% CI above zero, below zero, or neither; a hypothesis
confirmed or not), so a null reads as a null: the exploratory CPU study's concentration (`results/cpu_study.json`),
the frontier study's hypotheses H1-H3 (`results/frontier_study.json`) and the long-response study's H2-H4
(`results/long_study.json`), or how far it has run. The statistics behind each sentence (the designs, Holm
corrections, the matched Pass@1 level, the amendment, the exploratory whole-trajectory re-analysis) are in
docs/results.md. tests/test_docs.py checks that the README's block is what this renders from the committed files.

  python experiments/headline.py --write README.md
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cpu_study  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- headline:begin -->", "<!-- headline:end -->"
FRONTIER, CPU, LONG = "results/frontier_study.json", "results/cpu_study.json", "results/long_study.json"
FORK, CONTROL = "results/fork_study.json", "results/control_study.json"
SOURCES = (FRONTIER, CPU, LONG)  # FORK and CONTROL join them once their studies have written a summary


def interval(estimate: float, low: float, high: float) -> str:
    return f"{estimate:+.3f}, 95% CI {low:+.3f} to {high:+.3f}"


def concentration_sentence(cpu: dict) -> str:
    """GRPO against the base model at the largest k, by the sign of the paired CI (exploratory study)."""
    k, v = str(cpu["ks"][-1]), cpu["variants"]
    d = cpu["paired_differences"]["base - grpo"]["pass_at_k"][k]
    gain = -cpu["paired_differences"]["base - grpo"]["pass_at_k"]["1"]["mean"]
    base, grpo = v["base"]["pass_at_k"][k]["mean"], v["grpo"]["pass_at_k"][k]["mean"]
    where = f"(exploratory study, {len(cpu['study']['seeds'])} seeds)"
    verdict = {1: f"**GRPO concentrates.** RL with GRPO solved more problems on the first try (Pass@1 {gain:+.3f}) "
                  f"but fewer within {k} tries: Pass@{k} fell from {base:.3f} before RL to {grpo:.3f} {where}.",
               -1: f"**GRPO did not concentrate here.** Pass@{k} rose from {base:.3f} before RL to {grpo:.3f} {where}.",
               0: f"**GRPO's loss of coverage is not established here.** Pass@{k} was {base:.3f} before RL and "
                  f"{grpo:.3f} after {where}."}
    return verdict[cpu_study.ci_sign(d)]


def frontier_sentences(frontier: dict) -> list[str]:
    """ReCo (H1, H2) and ReCo with positive-only weights (H3) against GRPO at the same Pass@1."""
    h = {x["name"]: x for x in frontier["hypotheses"]}
    k, n = frontier["design"]["n_eval"], len(frontier["design"]["confirm_seeds"])  # Pass@n_eval: every sample
    h1, h2, h3 = h["H1"], h["H2"], h["H3"]
    where = f"In the pre-registered frontier study ({n} seeds), compared where both had reached Pass@1 = {h1['level']}"
    coverage = interval(h1["estimate"], h1["ci_low"], h1["ci_high"])
    if h1["confirmed"]:
        first = f"**ReCo kept more coverage than GRPO.** {where}, ReCo's Pass@{k} was higher ({coverage})"
    elif h1["ci_high"] < 0:
        first = f"**ReCo lost coverage against GRPO.** {where}, ReCo's Pass@{k} was lower ({coverage})"
    else:
        first = (f"**ReCo did not beat GRPO's coverage.** {where}, the difference in Pass@{k} was too small to tell "
                 f"from zero ({coverage})")
    final = interval(h2["estimate"], h2["ci_low"], h2["ci_high"])
    if h2["confirmed"]:
        first += f", and ReCo's final Pass@1 stayed within {h2['margin']} of GRPO's ({final})."
    elif h2["ci_high"] < 0:
        first += f", and ReCo's final Pass@1 was lower than GRPO's ({final})."
    else:
        first += f"; ReCo's final Pass@1 was not shown to stay within {h2['margin']} of GRPO's ({final})."
    positive = interval(h3["estimate"], h3["ci_low"], h3["ci_high"])
    second = (f"**One variant did:** ReCo with its response weights applied only to responses with a positive advantage "
              f"(`--occurrence-apply positive`) had a higher Pass@{k} than GRPO at the same Pass@1 ({positive})."
              if h3["confirmed"] else
              f"**Neither did its variant** with response weights on positive advantages only ({positive}).")
    return [first, second]


def long_study_sentence(long: dict) -> str:
    """The long-response study: while it runs, how far it is; then ReCo (H2), its token half (H3) and H4."""
    head = "**With longer responses** (countdown-long, where a group almost never repeats an answer word for word)"
    if long["partial"]:
        return (f"{head}: the study is **partial**, {long['compute']['runs']} of {long['compute']['runs_planned']} runs; "
                "no finding is drawn from it until it finishes.")
    h = {x["name"]: x for x in long["primary"]}
    k = long["design"]["k"]

    def compared(x: dict, who: str) -> str:
        gap = interval(x["mean"], x["ci_low"], x["ci_high"])
        if x["confirmed"]:
            return f"{who} beat GRPO (Pass@{k} gap {gap})"
        if x["ci_high"] < 0:
            return f"{who} did worse than GRPO (Pass@{k} gap {gap})"
        return f"{who} showed no detectable difference from GRPO (Pass@{k} gap {gap})"

    copies = "ReCo with a response weight that counts the same solution written differently as a copy"
    fork = h["H4"]
    shift = ("did move more of the update onto the tokens where solutions branch" if fork["confirmed"] else
             "did not measurably move the update onto the tokens where solutions branch")
    return (f"{head}, in a pre-registered study ({h['H2']['n']} seeds per arm): {compared(h['H2'], copies)}; "
            f"{compared(h['H3'], 'its token-level half alone')}, though it {shift}.")


def fork_study_lines(fork: dict | None) -> list[str]:
    """The fork study: nothing before its first summary, how far it is while it runs, then each claim by its rule,
    the detector's verdict and the stall counts."""
    if fork is None:
        return []
    import fork_study  # here, not at the top: importing it registers the fork arms in reco_mini
    head = "- **Aiming the token term at the tokens where solutions branch** ([docs/fork_study.md](docs/fork_study.md))"
    if fork["partial"]:
        return [f"{head}: **PARTIAL**: the study is partial ({fork['compute']['runs']} of "
                f"{fork['compute']['runs_planned']} runs in `{FORK}`), so no finding is drawn from it yet."]
    stalls = ", ".join(f"{a} {s['stalled']}/{s['runs']}" for a, s in fork["stalls"].items())
    return [f"{head}, {len(fork['design']['confirm_seeds'])} seeds per arm, paired by seed:",
            *[f"  - {claim}" for claim in fork_study.claims(fork)],
            f"  - {fork_study.detector_lines(fork)[-1].strip()}", f"  - Stalled runs per arm: {stalls}."]


def control_study_lines(control: dict | None) -> list[str]:
    """The positive-control study: nothing before its first summary, how far it is while it runs, then its answer."""
    if control is None:
        return []
    import control_study  # here, not at the top: importing it registers the fork arms in reco_mini
    head = "- **A positive control: can any method beat GRPO's coverage here?** ([docs/control_study.md](docs/control_study.md))"
    if control["partial"]:
        return [f"{head}: **PARTIAL**: the study is partial ({control['compute']['runs']} of "
                f"{control['compute']['runs_planned'] or '?'} runs in `{CONTROL}`), so no finding is drawn from it yet."]
    return [f"{head} {control_study.claims(control)[0]}"]


def sources() -> tuple[list[dict], dict | None, dict | None]:
    """The committed summaries render takes: SOURCES, and the fork and control studies' where they exist."""
    fork, control = ROOT / FORK, ROOT / CONTROL
    return ([json.loads((ROOT / path).read_text()) for path in SOURCES], json.loads(fork.read_text()) if fork.exists() else None,
            json.loads(control.read_text()) if control.exists() else None)


def render(frontier: dict, cpu: dict, long: dict, fork: dict | None = None, control: dict | None = None) -> str:
    """The block: one plain sentence per finding."""
    return "\n".join([
        f"_Generated from `{FRONTIER}`, `{CPU}`, `{LONG}`"
        + (f", `{FORK}`" + (" (PARTIAL: the study is partial)" if fork["partial"] else "") if fork else "")
        + (f", `{CONTROL}`" + (" (PARTIAL: the study is partial)" if control["partial"] else "") if control else "")
        + " by `python experiments/headline.py --write README.md`; "
        "rerun it rather than editing._",
        "",
        f"- {concentration_sentence(cpu)}",
        *[f"- {sentence}" for sentence in frontier_sentences(frontier)],
        f"- {long_study_sentence(long)}",
        *fork_study_lines(fork),
        *control_study_lines(control),
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
    required, fork, control = sources()
    block = render(*required, fork=fork, control=control)
    if args.write:
        write(args.write, block)
    else:
        print(block)
    return block


if __name__ == "__main__":  # a missing or malformed results file, a page without markers: one line, exit code 2
    import reco_io

    reco_io.run_entry_point("headline.py", main, (json.JSONDecodeError, FileNotFoundError))
