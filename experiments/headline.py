"""The findings in plain words, written from the committed results JSON, never typed: one sentence for the README's
opening (issue 54: what was measured, in one sentence), and for the summary at the top of docs/results.md a short
paragraph (two sentences, one more for each finished family of the positive-control study) and one line per study
(each hypothesis of the fork study).

Each sentence is chosen by a rule on a study's verdict (a 95% CI above zero, below zero, or neither; a hypothesis
confirmed or not), so a null reads as a null: the exploratory CPU study's concentration (`results/cpu_study.json`),
the frontier study's hypotheses H1-H3 (`results/frontier_study.json`), the long-response study's H2-H4
(`results/long_study.json`), the fork study's (`results/fork_study.json`) and the positive-control study's, or how
far a study has run: a partial one says PARTIAL. The statistics behind each sentence (the designs, Holm corrections,
the matched Pass@1 level, the amendment, the exploratory whole-trajectory re-analysis) are in docs/results.md.
tests/test_docs.py checks that both blocks are what this renders from the committed files.

  python experiments/headline.py --write README.md --write docs/results.md
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import cpu_study  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
BEGIN, END = "<!-- headline:begin -->", "<!-- headline:end -->"  # the README's two sentences
FINDINGS_BEGIN, FINDINGS_END = "<!-- findings:begin -->", "<!-- findings:end -->"  # docs/results.md's summary
FRONTIER, CPU, LONG = "results/frontier_study.json", "results/cpu_study.json", "results/long_study.json"
FORK, CONTROL, CODE = "results/fork_study.json", "results/control_study.json", "results/control_study_code.json"
NORM, REPLICATION = "results/norm_study.json", "results/replication_study.json"
SOURCES = (FRONTIER, CPU, LONG)  # FORK, CONTROL, CODE and NORM join them once their studies have written a summary


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


ARM_WORDS = {"reco": "ReCo", "reco-positive": "ReCo with positive-only weights",
             "reco-canonical": "ReCo counting the same solution written differently as a copy",
             "reco-token": "ReCo's token term alone", "reco-token-fork-oracle": "ReCo's token term at fork tokens",
             "reco-response-canonical": "ReCo's response term alone"}
PEER_WORDS = {"f-grpo": "F-GRPO", "pass-at-k": "Pass@k training", "ucpo": "UCPO", "simko": "SimKO",
              "zero-success": "the first-success gate"}  # zero-success under GRPO: not its paper's gate (issue 52)


def lr_text(lr: float) -> str:
    """2e-4, 5e-5, 2.5e-5: a learning rate as it is written in the docs."""
    mantissa, exponent = f"{lr:e}".split("e")
    return f"{float(mantissa):g}e{int(exponent)}"


def verdict(h: dict) -> str:
    """A coverage hypothesis of an arm against GRPO, by its rule: "more" (confirmed), "less" (95% CI below zero) or
    "none" (neither: a null, not evidence of no effect)."""
    return "more" if h["confirmed"] else "less" if h["ci_high"] < 0 else "none"


def coverage_comparisons(frontier: dict, long: dict, fork: dict | None) -> list[tuple[str, str]]:
    """(arm, verdict) of every pre-registered comparison of a form of ReCo with GRPO on coverage at matched training
    progress, in the finished studies: the frontier study's H1 and H3, the long study's H2 and H3, the fork study's H1
    and H3 (its H2 compares two ReCo arms; H4 was not tested)."""
    rows = [h for h in frontier["hypotheses"] if h["name"] in ("H1", "H3")]
    rows = [(h["method"], verdict(h)) for h in rows]
    if not long["partial"]:
        rows += [(h["arm"], verdict(h)) for h in long["primary"] if h["name"] in ("H2", "H3")]
    if fork is not None and not fork["partial"]:
        rows += [(h["arm"], verdict(h)) for h in fork["hypotheses"] if h["name"] in ("H1", "H3") and h["tested"]]
    return rows


def correction_partial(fork: dict) -> bool:
    """Whether the fork study's lr-matched correction (issue 42) is still running."""
    return fork.get("correction", {}).get("lr_matched", {}).get("partial", False)


def amendment_partial(control: dict) -> bool:
    """Whether the positive-control study's amendment 2 (grpo at the other arms' lrs, exploratory) is still running."""
    matched = control.get("lr_matched") or {}
    return bool(matched.get("runs_planned") and matched["partial"])


def running(long: dict, fork: dict | None, control: dict | None, code: dict | None = None,
            norm: dict | None = None) -> list[str]:
    """The studies, or parts of one, still partial in the committed summaries."""
    out = ["the long-response study"] if long["partial"] else []
    if fork is not None and fork["partial"]:
        out.append("the fork study")
    elif fork is not None and correction_partial(fork):
        out.append("the fork study's lr-matched correction")
    if control is not None and control["partial"]:
        out.append("the positive-control study")
    elif code is not None and code["partial"]:
        out.append("the positive-control study's code-tiny family")
    if control is not None and not control["partial"] and amendment_partial(control):
        out.append("the positive-control study's amendment 2")
    if norm is not None and norm["partial"]:
        out.append("the normalisation study")
    return out


def readme_sentences(frontier: dict, cpu: dict, long: dict, fork: dict | None = None,
                     control: dict | None = None, code: dict | None = None) -> list[str]:
    """docs/results.md's opening paragraph (the README's until issue 54): whether GRPO concentrates here (the CPU study),
    whether ReCo kept more coverage than GRPO (the frontier study's H1, then every pre-registered comparison), with
    what is still partial, and the positive-control study's answer once it has one."""
    k, n = str(cpu["ks"][-1]), len(cpu["study"]["seeds"])
    where = f"(exploratory, {n} seeds)"
    first = {1: f"On a tiny model learning Countdown on a CPU, GRPO solved more problems on the first try than the model "
                f"it started from but fewer within {k} tries {where}: it concentrates.",
             -1: f"On a tiny model learning Countdown on a CPU, GRPO did not lose coverage: it solved more problems within "
                 f"{k} tries than the model it started from {where}.",
             0: f"On a tiny model learning Countdown on a CPU, GRPO's loss of coverage is not established: within {k} "
                f"tries it solved about as many problems as the model it started from {where}."}
    h1 = next(h for h in frontier["hypotheses"] if h["name"] == "H1")
    said = {"more": "kept more coverage than GRPO", "less": "kept less coverage than GRPO",
            "none": "did not keep measurably more coverage than GRPO"}[verdict(h1)]
    rows = coverage_comparisons(frontier, long, fork)
    counts = {v: [ARM_WORDS.get(a, a) for a, x in rows if x == v] for v in ("more", "less", "none")}

    def part(v: str, words: str) -> str:
        return f"{len(counts[v])} {words}" + (f" ({', '.join(counts[v])})" if counts[v] and v != "none" else "")

    second = (f"ReCo {said} at the same first-try success in the pre-registered frontier study, and of the {len(rows)} "
              f"pre-registered comparisons of a form of ReCo with GRPO, {part('more', 'found more coverage')}, "
              f"{part('less', 'less')} and {part('none', 'no detectable difference')}")
    partial = running(long, fork, control, code)
    second += (f" (**PARTIAL**: {' and '.join(partial)} {'is' if len(partial) == 1 else 'are'} still running)."
               if partial else ".")
    return [first[cpu_study.ci_sign(cpu["paired_differences"]["base - grpo"]["pass_at_k"][k])], second,
            *control_sentence(control), *code_sentence(code)]


def readme_sentence(frontier: dict, cpu: dict, long: dict, fork: dict | None = None, control: dict | None = None,
                    code: dict | None = None, norm: dict | None = None, replication: dict | None = None) -> str:
    """The README's one sentence of what was measured: whether GRPO concentrated here, how many pre-registered
    comparisons found a form of ReCo keeping more coverage than GRPO, which methods with published gains did at
    GRPO's learning rate, the normalisation study's answer once it has one, and what is still partial."""
    k, n = str(cpu["ks"][-1]), len(cpu["study"]["seeds"])
    grpo = {1: f"GRPO solved more problems on the first try but fewer within {k} tries than the model it started from",
            -1: f"GRPO did not lose coverage within {k} tries",
            0: f"GRPO's loss of coverage within {k} tries is not established"}[
        cpu_study.ci_sign(cpu["paired_differences"]["base - grpo"]["pass_at_k"][k])]
    rows = coverage_comparisons(frontier, long, fork)
    more, less = (sum(v == x for _, v in rows) for x in ("more", "less"))
    sentence = (f"On a tiny model learning Countdown on a CPU, {grpo} (exploratory, {n} seeds), and a form of ReCo kept "
                f"more coverage than GRPO in {more} of {len(rows)} pre-registered comparisons (less in {less})")
    if control is not None and not control["partial"]:
        import control_study  # here, not at the top: importing it registers the fork arms in reco_mini
        same = control_study.confirmed_at_grpo_lr(control)
        names = [PEER_WORDS.get(a, ARM_WORDS.get(a, a)) for a in same]
        sentence += (f", while {' and '.join(names)} kept more at GRPO's learning rate{lr_caveat(control)}" if names
                     else ", and no method with published coverage gains kept more at GRPO's learning rate")
    sentence += norm_clause(norm)
    partial = running(long, fork, control, code, norm)
    if partial:
        sentence += f" (**PARTIAL**: {' and '.join(partial)} {'is' if len(partial) == 1 else 'are'} still running)"
    default = default_sentence(norm, replication, statistics=False)
    return sentence + (f"; {default}" if default else ".")


def lr_caveat(control: dict) -> str:
    """Issue 52's correction in a few words: which lr the positive controls won at, and how much less at a lower one."""
    import control_study

    reading = control_study.same_lr_reading(control)
    if not reading:
        return ""
    lower = [g for g in reading["gains"].values() if g["at_own_lr"] is not None]
    if not lower:
        return f" ({lr_text(reading['reference_lr'])})"
    ratio = sum(g["at_own_lr"] / g["at_grpo_lr"] for g in lower) / len(lower)
    size = "about half as much" if 0.35 <= ratio <= 0.65 else f"{ratio:.0%} as much"
    lrs = " and ".join(lr_text(x) for x in sorted({g["own_lr"] for g in lower}))
    return f" ({lr_text(reading['reference_lr'])}; {size} at {lrs})"


def norm_clause(norm: dict | None) -> str:
    """The normalisation study's answer (issue 52) when it kept the old default, by its DEFAULT_RULE and its family's
    Holm verdicts; nothing while it is partial (the PARTIAL clause names it) or when it changed the default
    (default_sentence says that)."""
    if norm is None or norm["partial"] or norm["default"]["confirmed_at_both_lrs"]:
        return ""
    confirmed = sum(bool(r.get("confirmed")) for r in norm["family"])
    return (f"; normalising ReCo's weights over the batch instead of within each group confirmed {confirmed} of "
            f"{len(norm['family'])} pre-registered contrasts, so ReCo's default stays per group")


DEFAULT_WORDS = {"reco-batch": "weights normalised over the whole batch",
                 "reco-positive-batch": "weights normalised over the whole batch and applied only where the advantage is "
                                        "positive"}


def default_sentence(norm: dict | None, replication: dict | None = None, statistics: bool = True) -> str:
    """Issue 59: the default the normalisation study chose, read with its limits: at which lr it held robustly (every
    leave-one-seed-out recomputation still confirmed) or at the threshold, whether batch normalisation alone did
    anything, whether F-GRPO kept as much (the default's secondary contrast with F-GRPO, its CI spanning zero) and
    the final Pass@1 gap to it with its interval, and the replication's state. Without `statistics` (the README's first
    screen): no p-values, and a clause to join to the sentence before it."""
    from analysis import leave_one_out_holm

    if norm is None or norm["partial"] or not norm["default"]["confirmed_at_both_lrs"]:
        return ""
    arm = norm["default"]["confirmed_at_both_lrs"][0]
    loo = leave_one_out_holm(norm["family"])
    held = []
    for i, r in enumerate(norm["family"]):
        if r["arm"] == arm and r["reference"] == "grpo":
            ps = [p[i] for p in loo.values()]
            lost = sum(p is None or p >= 0.05 for p in ps)
            p_holm = f", Holm p {r['p_holm']:.3f}" if statistics else ""
            held.append(f"robustly at {lr_text(r['lr'])}" if not lost else
                        f"at {lr_text(r['lr'])} only at the threshold{p_holm}, lost when any one of {lost} of its "
                        f"{len(ps)} seeds is left out")
    undone = replication is not None and not replication["partial"] and not replication["default"]["stays"]
    lead = "the normalisation study's default" if undone else "ReCo's default since the normalisation study"
    lead = lead[0].upper() + lead[1:] if statistics else lead  # the README joins it to the sentence before it
    sentence = f"{lead}, {DEFAULT_WORDS[arm]}, kept more coverage than GRPO there ({'; '.join(held)})"
    if arm == "reco-positive-batch" and not any(r.get("confirmed") for r in norm["family"] if r["arm"] == "reco-batch"):
        sentence += "; batch normalisation alone did not"
    peer = [r for r in norm["secondary"] if r["arm"] == arm and r["reference"] == "f-grpo" and r.get("mean") is not None]
    same = [r for r in peer if r["ci_low"] < 0 < r["ci_high"]]
    if same:
        r = min(same, key=lambda r: r["lr"])
        f1 = r["final_pass_at_1"]
        sentence += ", F-GRPO kept as much" + (
            f" with a higher first-try success at the last checkpoint (the default's final Pass@1 minus F-GRPO's: "
            f"{interval(f1['mean'], f1['ci_low'], f1['ci_high'])}, at {lr_text(r['lr'])})" if f1["ci_high"] < 0 else "")
    if replication is None:
        return sentence + "."
    if replication["partial"]:
        return sentence + ", and a replication on fresh seeds is running."
    d = replication["default"]
    if d["stays"]:
        return sentence + (f"; a pre-registered replication on fresh seeds confirmed it at "
                           f"{' and '.join(lr_text(x) for x in d['confirmed_at'])}, so it stays.")
    figures = "" if not statistics else " (" + "; ".join(
        f"{interval(r['mean'], r['ci_low'], r['ci_high'])}, Holm p {r['p_holm']:.3f}, at {lr_text(r['lr'])}"
        for r in replication["family"] if r["reference"] == "grpo") + ")"
    return sentence + (f"; a pre-registered replication on fresh seeds did not confirm it at either learning rate{figures}, "
                       "so ReCo's default went back to per-group weights on every response.")


def control_sentence(control: dict | None) -> list[str]:
    """The positive-control study's answer, once it has finished (a partial one is named in the PARTIAL clause):
    which methods kept more coverage than GRPO at the same lr, which only at an lr of their own (a contrast that also
    changes the lr), and ReCo beside them; or that none did, so the ReCo nulls above say little."""
    if control is None or control["partial"]:
        return []
    import control_study  # here, not at the top: importing it registers the fork arms in reco_mini

    def words(arms: list[str]) -> str:
        names = [ARM_WORDS.get(a, PEER_WORDS.get(a, a)) for a in arms]
        return ", ".join(names[:-1]) + f" and {names[-1]}" if len(names) > 1 else names[0]
    peers = [PEER_WORDS[a] for a in control["design"]["arms_run"] if a in PEER_WORDS and a != "zero-success"]
    same = control_study.confirmed_at_grpo_lr(control)
    own = [a for a in control["positive_controls"] if a not in same]
    if not control["positive_controls"]:
        return [f"No tested method kept more coverage than GRPO at the same first-try success, the {len(peers)} with "
                f"published coverage gains included ({', '.join(peers)}), so this CPU regime showed no coverage gain for "
                "any of them and its ReCo nulls say little about the paper's claim at scale."]
    gate = " and a first-success gate" if "zero-success" in control["design"]["arms_run"] else ""
    head = (f"In a pre-registered positive-control study (ReCo beside {len(peers)} methods with published coverage "
            f"gains{gate}), ")
    reading = control_study.same_lr_reading(control)
    if reading and same:  # issue 52: where the gains were measured, and every other arm against GRPO at the same lr
        gains = reading["gains"]
        at = " and ".join(f"{g['at_grpo_lr']:+.3f}" for g in gains.values())
        sentence = (f"{words(same)} kept more coverage than GRPO at the same first-try success, measured at GRPO's "
                    f"learning rate {lr_text(reading['reference_lr'])} ({at}")
        lower = {a: g for a, g in gains.items() if g["at_own_lr"] is not None}
        if lower:
            ratio = sum(g["at_own_lr"] / g["at_grpo_lr"] for g in lower.values()) / len(lower)
            size = "about half" if 0.35 <= ratio <= 0.65 else f"{ratio:.0%} of it"
            lrs = " and ".join(lr_text(x) for x in sorted({g["own_lr"] for g in lower.values()}))
            own_gaps = " and ".join(f"{g['at_own_lr']:+.3f}" for g in lower.values())
            sentence += f"; at {lrs}, against GRPO there, {size}: {own_gaps}, exploratory"
        sentence += ")"
        others = sorted(reading["matched"], key=lambda a: (a not in ("reco", "reco-positive"), a == "zero-success"))
        if others:
            sentence += f"; at the same learning rate, GRPO showed no detectable difference from {words(others)}"
        if reading["worse"]:
            sentence += f"; {words(reading['worse'])} did worse than GRPO at the same learning rate"
        return [head + sentence + "."]
    parts = [f"{words(same)} kept more coverage than GRPO at the same first-try success and the same learning rate"] \
        if same else ["no tested method kept more coverage than GRPO at the same first-try success and the same learning "
                      "rate"]
    if own:
        parts.append(f"{words(own)} did so only at a learning rate of {'its' if len(own) == 1 else 'their'} own, a "
                     "contrast that changes the learning rate too")
    if same and not set(control["positive_controls"]) & {"reco", "reco-positive"}:
        parts.append("ReCo did not at the same learning rate")
    return [head + "; ".join(parts) + "."]


def code_sentence(code: dict | None) -> list[str]:
    """The positive-control study's second family (code-tiny), once it has finished."""
    if code is None or code["partial"]:
        return []
    found = [ARM_WORDS.get(a, PEER_WORDS.get(a, a)) for a in code["positive_controls"]]
    return [f"On a small code-writing task, the study's second family, {', '.join(found) or 'no tested method'} kept "
            "more coverage than GRPO at the same first-try success."]


def fork_study_lines(fork: dict | None, docs: str = "docs/") -> list[str]:
    """The fork study: nothing before its first summary, how far it is while it runs, then each claim by its rule,
    the detector's verdict and the stall counts."""
    if fork is None:
        return []
    import fork_study  # here, not at the top: importing it registers the fork arms in reco_mini
    head = f"- **Aiming the token term at the tokens where solutions branch** ([docs/fork_study.md]({docs}fork_study.md))"
    if fork["partial"]:
        return [f"{head}: **PARTIAL**: the study is partial ({fork['compute']['runs']} of "
                f"{fork['compute']['runs_planned']} runs in `{FORK}`), so no finding is drawn from it yet."]
    stalls = ", ".join(f"{a} {s['stalled']}/{s['runs']}" for a, s in fork["stalls"].items())
    return [f"{head}, {len(fork['design']['confirm_seeds'])} seeds per arm, paired by seed:",
            *[f"  - {claim}" for claim in fork_study.claims(fork)],
            f"  - {fork_study.detector_lines(fork)[-1].strip()}", f"  - Stalled runs per arm: {stalls}."]


def control_study_lines(control: dict | None, code: dict | None = None, docs: str = "docs/") -> list[str]:
    """The positive-control study, each family: nothing before its first summary, how far it is while it runs, then
    its answer."""
    if control is None and code is None:
        return []
    import control_study  # here, not at the top: importing it registers the fork arms in reco_mini
    head = (f"- **A positive control: can any method beat GRPO's coverage here?** "
            f"([docs/control_study.md]({docs}control_study.md))")
    out = []
    for summary, path, family in ((control, CONTROL, ""), (code, CODE, ", code-tiny family")):
        if summary is None:
            continue
        c = summary["compute"]
        answer = (control_sentence(summary) if path == CONTROL else []) or control_study.claims(summary)[:1]
        out.append(f"{head}{family}: **PARTIAL**: the study is partial ({c['runs']} of {c['runs_planned'] or '?'} runs "
                   f"in `{path}`), so no finding is drawn from it yet." if summary["partial"] else
                   f"{head}{family}: {answer[0]}")
    return out


def norm_study_lines(norm: dict | None, docs: str = "docs/", replication: dict | None = None) -> list[str]:
    """The normalisation study: nothing before its first summary, how far it is while it runs, then its answer."""
    if norm is None:
        return []
    head = (f"- **Does ReCo's normalisation explain its null?** ([docs/norm_study.md]({docs}norm_study.md))")
    c = norm["compute"]
    if norm["partial"]:
        return [f"{head}: **PARTIAL**: the study is partial ({c['runs']} of {c['runs_planned']} runs in `{NORM}`), so no "
                "finding is drawn from it yet."]
    clause = norm_clause(norm).removeprefix("; ")
    if clause:
        return [f"{head}: {clause[:1].upper()}{clause[1:]}."]
    return [f"{head}: {default_sentence(norm, replication)} The whole account: [docs/findings.md]({docs}findings.md)."]


def sources() -> tuple[list[dict], dict[str, dict | None]]:
    """The committed summaries render takes: SOURCES, and the other studies' (by keyword) where they exist."""
    optional = {"fork": ROOT / FORK, "control": ROOT / CONTROL, "code": ROOT / CODE, "norm": ROOT / NORM,
                "replication": ROOT / REPLICATION}
    return ([json.loads((ROOT / path).read_text()) for path in SOURCES],
            {name: json.loads(path.read_text()) if path.exists() else None for name, path in optional.items()})


def generated_from(fork: dict | None, control: dict | None, page: str, code: dict | None = None,
                   norm: dict | None = None, replication: dict | None = None) -> str:
    partial = " (PARTIAL: the study is partial)"
    return (f"_Generated from `{FRONTIER}`, `{CPU}`, `{LONG}`"
            + (f", `{FORK}`" + (partial if fork["partial"] else
                                " (PARTIAL: its lr-matched correction is partial)" if correction_partial(fork) else "")
               if fork else "")
            + "".join(f", `{path}`" + (partial if summary["partial"] else " (PARTIAL: its amendment 2 is partial)"
                                       if path == CONTROL and amendment_partial(summary) else "")
                      for path, summary in ((CONTROL, control), (CODE, code), (NORM, norm), (REPLICATION, replication))
                      if summary)
            + f" by `python experiments/headline.py --write {page}`; rerun it rather than editing._")


def render_readme(frontier: dict, cpu: dict, long: dict, fork: dict | None = None, control: dict | None = None,
                  code: dict | None = None, norm: dict | None = None, replication: dict | None = None) -> str:
    """The README's block: one sentence of what was measured, and one of ReCo's default."""
    return "\n".join([generated_from(fork, control, "README.md", code, norm, replication), "",
                      readme_sentence(frontier, cpu, long, fork, control, code, norm, replication)])


def render(frontier: dict, cpu: dict, long: dict, fork: dict | None = None, control: dict | None = None,
           code: dict | None = None, norm: dict | None = None, replication: dict | None = None) -> str:
    """docs/results.md's summary block: the plain paragraph, then one sentence per finding, each of the fork study's
    hypotheses."""
    return "\n".join([
        generated_from(fork, control, "docs/results.md", code, norm, replication),
        "",
        " ".join(readme_sentences(frontier, cpu, long, fork, control, code)),
        "",
        f"- {concentration_sentence(cpu)}",
        *[f"- {sentence}" for sentence in frontier_sentences(frontier)],
        f"- {long_study_sentence(long)}",
        *fork_study_lines(fork, docs=""),
        *control_study_lines(control, code, docs=""),
        *norm_study_lines(norm, docs="", replication=replication),
    ])


def write(path: Path, blocks: dict[tuple[str, str], str]) -> None:
    """Fill each (begin, end) marker pair of `blocks` that the page has; a page with none is an error."""
    text = path.read_text()
    found = [(begin, end) for begin, end in blocks if begin in text and end in text]
    if not found:
        raise SystemExit(f"error: {path} has no {BEGIN} ... {END} or {FINDINGS_BEGIN} ... {FINDINGS_END} markers")
    for begin, end in found:
        head, rest = text.split(begin, 1)
        text = head + begin + "\n" + blocks[(begin, end)] + "\n" + end + rest.split(end, 1)[1]
    path.write_text(text)


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", type=Path, action="append", default=[],
                        help="page to fill between its markers: README.md (one sentence), docs/results.md (summary)")
    args = parser.parse_args(argv)
    required, optional = sources()
    blocks = {(BEGIN, END): render_readme(*required, **optional),
              (FINDINGS_BEGIN, FINDINGS_END): render(*required, **optional)}
    for path in args.write:
        write(path, blocks)
    text = "\n\n".join(blocks.values())
    if not args.write:
        print(text)
    return text


if __name__ == "__main__":  # a missing or malformed results file, a page without markers: one line, exit code 2
    from reco import cli

    cli.run_entry_point("headline.py", main, (json.JSONDecodeError, FileNotFoundError))
