"""docs/findings.md, written from the committed results JSON (issue 59): what this repository measured about ReCo, one
page a researcher can read in ten minutes and cite. Every number on the page comes from a file under results/; the
words around them are chosen by rules on those numbers (a 95% CI above zero, below zero, or neither; a pre-registered
contrast confirmed or not), so a null reads as a null. tests/test_findings.py checks that the committed page is what
this renders.

  python experiments/findings.py --write docs/findings.md
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import headline  # noqa: E402  (the concentration sentence, shared with the README's)
import inertness  # noqa: E402  (the closed form)
from analysis import leave_one_out_holm  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CPU, FRONTIER, LONG, FORK = headline.CPU, headline.FRONTIER, headline.LONG, headline.FORK
CONTROL, CODE, NORM = headline.CONTROL, headline.CODE, headline.NORM
REPLICATION, INERTNESS = "results/replication_study.json", "results/inertness.json"
RECO_CONFIG = "reco_scaled/configs/qwen2.5-math-1.5b-reco.yaml"  # section 7 reads its response-weight settings

FORMS = {  # arm -> what it is, naming the form of the response weight (norm / apply) where it has one
    "reco": "ReCo, weights normalised per group, on every response (the default)",
    "reco-positive": "ReCo, weights normalised per group, on A > 0 only",
    "reco-canonical": "ReCo, a copy = the same solution in any form, per group, every response",
    "reco-token": "ReCo's token term alone (GRPO's response weights)",
    "reco-token-fork-oracle": "ReCo's token term at the tokens where solutions branch",
    "reco-response-canonical": "ReCo's response term alone, a copy = the same solution in any form",
    "reco-batch": "ReCo, weights normalised over the batch, on every response",
    "reco-positive-batch": "ReCo, weights normalised over the batch, on A > 0 only (batch/positive, the default from issue 52 to 59)",
    "reco-response-batch": "ReCo's response term alone, normalised over the batch, every response",
    "f-grpo": "F-GRPO (γ = 1)", "f-grpo-g0.5": "F-GRPO (γ = 0.5, its paper's)", "pass-at-k": "Pass@k training (k = 4)",
    "ucpo": "UCPO", "simko": "SimKO", "zero-success": "a first-success gate under GRPO",
}
REPLICATION_FORMS = {  # the replication study's names (its reco is batch/positive)
    "reco": "ReCo, batch/positive", "reco-response": "batch/positive weights, GRPO's token ratio",
    "reco-prompt": "batch/positive weights averaged over each group's A > 0 responses", "f-grpo": FORMS["f-grpo"],
}


def load(path: str) -> dict | None:
    p = ROOT / path
    return json.loads(p.read_text()) if p.exists() else None


def ci(x: dict) -> str:
    return f"{x['mean']:+.3f} ({x['ci_low']:+.3f}, {x['ci_high']:+.3f})"


def reading(row: dict, adjusted: bool) -> str:
    """The rule: a pre-registered contrast is 'more' only if Holm confirms it; an unadjusted one says so."""
    if adjusted and row.get("confirmed"):
        return "**more** (confirmed, Holm)"
    if row["ci_low"] > 0:
        return "more (CI above zero, unadjusted)" if not adjusted else "CI above zero, not confirmed by Holm"
    if row["ci_high"] < 0:
        return "**less** (CI below zero)"
    return "no detectable difference"


def lr_text(lr: float | None) -> str:
    return "–" if lr is None else headline.lr_text(lr)


def selected_lr(choices: dict, arm: str) -> str:
    """The lr each arm of a study with a per-arm lr selection ran at, and GRPO's where it differs."""
    lr = lambda a: choices[a]["lr"] if isinstance(choices[a], dict) else choices[a]  # noqa: E731
    return lr_text(lr(arm)) + ("" if lr(arm) == lr("grpo") else f" (GRPO {lr_text(lr('grpo'))})")


def coverage_rows(s: dict) -> list[list[str]]:
    """One row per contrast of a form with grpo on coverage at matched Pass@1, from every finished study."""
    rows = []
    if s["frontier"]:
        h = {x["name"]: x for x in s["frontier"]["hypotheses"]}
        for name, arm in (("H1", "reco"), ("H3", "reco-positive")):
            x = h[name] | {"mean": h[name]["estimate"]}
            rows.append([FORMS[arm], selected_lr(s["frontier"]["selection"]["choices"], arm),
                         f"Pass@256 gap at Pass@1 = {s['frontier']['matched_level']}", ci(x),
                         reading(x, True), f"frontier ({x['n']} seeds, pre-registered {name})"])
    for key, study, task in (("long", "long-response", "countdown-long"), ("fork", "fork", "countdown-long")):
        summary = s[key]
        if summary is None or summary["partial"]:
            continue
        for x in summary["primary" if key == "long" else "hypotheses"]:
            if x.get("mean") is None or x["reference"] != "grpo" or (key == "long" and x["name"] == "H4"):
                continue
            rows.append([FORMS[x["arm"]], selected_lr(summary["selection"]["choices"], x["arm"]),
                         f"mean Pass@64 gap, shared Pass@1 range ({task})", ci(x),
                         reading(x, True), f"{study} ({x['n']} seeds, pre-registered {x['name']})"])
    for key, task, k in (("control", "Countdown", 256), ("code", "code-tiny", 64)):
        summary = s[key]
        if summary is None or summary["partial"]:
            continue
        for x in summary["family"]:
            if x["reference"] == "grpo" and "grpo's" in x["name"]:  # at grpo's lr (the others change the lr too)
                where = "" if task == "Countdown" else f" ({task})"
                rows.append([FORMS[x["arm"]], lr_text(x["lr"]), f"mean Pass@{k} gap, shared Pass@1 range{where}", ci(x),
                             reading(x, True), f"positive control ({x['n']} seeds, pre-registered)"])
    if s["norm"] and not s["norm"]["partial"]:
        for part, adjusted in (("family", True), ("secondary", False), ("exploratory", False)):
            for x in s["norm"][part]:
                if x["reference"] == "grpo" and x.get("mean") is not None:
                    label = "pre-registered" if adjusted else "secondary" if part == "secondary" else "exploratory"
                    rows.append([FORMS[x["arm"]], lr_text(x["lr"]), "mean Pass@256 gap, shared Pass@1 range", ci(x),
                                 reading(x, adjusted), f"normalisation ({x['n']} seeds, {label})"])
    r = s["replication"]
    if r and not r["partial"]:
        for x in r["family"]:
            rows.append([REPLICATION_FORMS["reco"], lr_text(x["lr"]), "mean Pass@256 gap, shared Pass@1 range", ci(x),
                         reading(x, True), f"replication ({x['n']} seeds, pre-registered)"])
    return rows


def versus_rows(s: dict) -> list[str]:
    """batch/positive against F-GRPO and its own parts, where a study compared them."""
    out = []
    if s["norm"] and not s["norm"]["partial"]:
        for x in s["norm"]["secondary"]:
            if x["arm"] == "reco-positive-batch" and x["reference"] == "f-grpo":
                equivalent = x["p_tost"] is not None and x["p_tost"] < 0.05
                out.append(f"- batch/positive − F-GRPO at lr {lr_text(x['lr'])}: {ci(x)}, TOST p {x['p_tost']:.3f}"
                           + (f" (equivalent within ±{s['norm']['design']['equivalence_margin']:g})" if equivalent else "")
                           + "; final Pass@1 "
                           f"{ci(x['final_pass_at_1'])} (normalisation study, secondary, {x['n']} seeds).")
        fam = {(x["arm"], x["reference"], x["lr"]): x for x in s["norm"]["family"]}
        for lr in s["norm"]["design"]["lrs"]:
            x = fam.get(("reco-batch", "reco", lr))
            if x:
                out.append(f"- Batch normalisation alone (reco-batch − reco, both on every response) at lr {lr_text(lr)}: "
                           f"{ci(x)}: {reading(x, True)} (normalisation study, pre-registered).")
    if s["frontier"]:
        h = {x["name"]: x for x in s["frontier"]["hypotheses"]}["H3"]
        h = h | {"mean": h["estimate"]}
        out.append(f"- Positive-only alone, per group (reco-positive − grpo) at lr "
                   f"{selected_lr(s['frontier']['selection']['choices'], 'reco-positive')}, Pass@256 gap at Pass@1 = "
                   f"{s['frontier']['matched_level']}: {ci(h)}: {reading(h, True)} (frontier study, pre-registered).")
    if s["control"] and not s["control"]["partial"]:
        for x in s["control"]["family"]:
            if x["arm"] == "reco-positive" and "grpo's" in x["name"]:
                out.append(f"- Positive-only alone, per group (reco-positive − grpo) at lr {lr_text(x['lr'])}: {ci(x)}: "
                           f"{reading(x, True)} (positive control, pre-registered).")
    r = s["replication"]
    if r and not r["partial"]:
        for x in r["secondary"]:
            out.append(f"- {x['name']}: {ci(x)}, TOST p {x['p_tost']:.3f}; final Pass@1 {ci(x['final_pass_at_1'])} "
                       f"(replication, secondary, {x['n']} seeds).")
    return out


def robustness_lines(s: dict) -> list[str]:
    """The normalisation study's confirmation of the default, read for how much it leans on one seed or one reading."""
    norm = s["norm"]
    if not norm or norm["partial"]:
        return []
    out, loo = [], leave_one_out_holm(norm["family"])
    for i, x in enumerate(norm["family"]):
        if x["arm"] == "reco-positive-batch" and x["reference"] == "grpo":
            margin = "at the threshold" if 0.01 <= x["p_holm"] < 0.05 else "robustly" if x["p_holm"] < 0.01 else "not"
            ps = [p[i] for p in loo.values()]
            out.append(f"- Normalisation study, lr {lr_text(x['lr'])}: {ci(x)}, Holm p {x['p_holm']:.3f} (confirmed "
                       f"{margin}); per seed, positive in {sum(v > 0 for v in x['per_seed'].values() if v is not None)} "
                       f"of {x['n']}; leaving out one seed, confirmed in {sum(p < 0.05 for p in ps)} of {len(ps)} cases "
                       f"(Holm p {min(ps):.3f} to {max(ps):.3f}); the last-visit reading {ci(x['last_visit'])}.")
    r = s["replication"]
    if r and r.get("leave_one_seed_out") and not r["partial"]:
        for i, x in enumerate(r["family"]):
            ps = [d["rows"][i]["p_holm"] for d in r["leave_one_seed_out"] if d["rows"][i]["p_holm"] is not None]
            out.append(f"- Replication, lr {lr_text(x['lr'])}, leaving out one seed: Holm p {min(ps):.3f} to {max(ps):.3f}.")
    return out


def share_rows(s: dict) -> list[list[str]]:
    rows = []
    for key, forms in (("norm", FORMS), ("replication", REPLICATION_FORMS)):
        summary = s[key]
        if not summary or summary["partial"]:
            continue
        study = "normalisation" if key == "norm" else "replication"
        for v in summary["arms"].values():
            shares = [v["shares"][f"update_share_{b}"]["mean"] for b in ("hard", "mid", "easy")]
            if None in shares:
                continue
            rows.append([forms.get(v["arm"], v["arm"]) if v["arm"] != "grpo" else "GRPO", lr_text(v["lr"]),
                         *(f"{x:.3f}" for x in shares), f"{v['final_pass_at_1']['mean']:.3f}", study])
    return rows


def mechanism_sentence(s: dict) -> str:
    """Whether every form with more coverage than grpo (confirmed, or CI above zero) moved weight off easy groups."""
    norm = s["norm"]
    if not norm or norm["partial"]:
        return ""
    easy = {(v["arm"], v["lr"]): v["shares"]["update_share_easy"]["mean"] for v in norm["arms"].values()}
    winners = [x for x in norm["family"] + norm["secondary"] + norm["exploratory"]
               if x["reference"] == "grpo" and x.get("mean") is not None and (x.get("confirmed") or x["ci_low"] > 0)]
    lower = [x for x in winners if easy[(x["arm"], x["lr"])] < easy[("grpo", x["lr"])]]
    head = (f"In the normalisation study, {len(lower)} of the {len(winners)} arm-and-lr pairs that kept more coverage than "
            "GRPO put a smaller share of their update on the groups the policy already solves (c ≥ 3G/4 correct) than GRPO "
            "at the same lr")
    return head + (": the common mechanism is that weight leaves the solved groups." if lower == winners else
                   "; the shares alone do not explain every gain.")


def price_lines(s: dict) -> list[str]:
    out = []
    if s["frontier"]:
        h = {x["name"]: x for x in s["frontier"]["hypotheses"]}["H2"]
        out.append(f"- ReCo (per group, every response) − GRPO, final Pass@1: {ci(h | {'mean': h['estimate']})} "
                   f"(frontier study, {h['n']} seeds).")
    if s["norm"] and not s["norm"]["partial"]:
        for x in s["norm"]["family"] + s["norm"]["secondary"]:
            if x["reference"] in ("grpo", "f-grpo") and x["arm"] in ("reco-positive-batch", "f-grpo"):
                f1 = x["final_pass_at_1"]
                spans = " (the interval spans zero)" if f1["ci_low"] < 0 < f1["ci_high"] else ""
                out.append(f"- {FORMS[x['arm']]} − {'GRPO' if x['reference'] == 'grpo' else 'F-GRPO'} at lr "
                           f"{lr_text(x['lr'])}, final Pass@1: {ci(f1)}{spans} (normalisation study).")
    r = s["replication"]
    if r and not r["partial"]:
        for x in r["family"] + r["secondary"]:
            out.append(f"- {x['name']}, final Pass@1: {ci(x['final_pass_at_1'])} (replication).")
    return out


def transfer_lines(s: dict) -> list[str]:
    out = ["| response length L (tokens) | q* = mean per-token probability at which w moves 1% (G = 8) |", "|---|---|"]
    out += [f"| {L:,} | {inertness.threshold_q(L):.4f} |" for L in inertness.LENGTHS]
    m = s["inertness"]
    if m is None or m.get("quick"):
        return out + ["", "The measured side (`python experiments/inertness.py`) has not been run into `results/` yet."]
    out += ["", f"Measured: ReCo with batch/positive weights trained {m['steps']} steps (seed {m['seed']}, lr {lr_text(m['lr'])}), "
            "the first and last ten steps' means and the run's extremes:", "",
            "| task | mean length (last 10) | q mean, first 10 → last 10 | q 90th pct (last 10) | largest q | q* at its length | "
            "share of A > 0 responses with \\|w − 1\\| > 1% (first 10 → last 10) | w range over the run |",
            "|---|---|---|---|---|---|---|---|"]
    for task, t in m["tasks"].items():
        a, b = t["first_10"], t["last_10"]
        moved = " → ".join("–" if x is None else f"{x:.3f}" for x in (a["moved_positive"], b["moved_positive"]))
        out.append(f"| {task} | {b['length_mean']:.1f} | {a['q_mean']:.3f} → {b['q_mean']:.3f} | {b['q_p90']:.3f} | "
                   f"{t['largest']['q_max']:.3f} | {m['threshold_q'][f'{task}_length']:.3f} | {moved} | "
                   f"{t['smallest_w_min']:.3f} to {t['largest']['w_max']:.3f} |")
    longest = max(m["tasks"].values(), key=lambda t: t["last_10"]["length_mean"])
    reach = longest["last_10"]["q_mean"]
    need = inertness.threshold_q(inertness.LENGTHS[-1])
    moved = longest["last_10"]["moved_positive"] or 0.0
    shorter = [t["last_10"]["moved_positive"] or 0.0 for t in m["tasks"].values() if t is not longest]
    out += ["", f"At {longest['last_10']['length_mean']:.0f} tokens the batch/positive weight moved by more than 1% on "
            f"{moved:.1%} of the A > 0 responses of the last ten steps"
            + (f", against {min(shorter):.1%} on the shorter answers." if shorter else ".")]
    out += ["", f"At {inertness.LENGTHS[-1]:,} tokens a response's weight moves by 1% only if its mean per-token "
            f"probability is at least {need:.4f}; the longer task's trained policy reaches {reach:.3f} on average. "
            + ("So at the paper's lengths ReCo's response weight, as the paper writes it, is 1 for every response: "
               "under any normalisation it is GRPO's response weighting, and what is left of ReCo is its token "
               "term, unless the policy is near-deterministic." if reach < need else
               "Here the policy is near-deterministic enough for the weight to act even at the paper's lengths.")]
    return out


def replication_lines(s: dict) -> list[str]:
    r = s["replication"]
    if r is None:
        return ["Not started: the default rests on the normalisation study alone."]
    c = r["compute"]
    if r["partial"]:
        return [f"**PARTIAL:** {c['runs']} of {c['runs_planned']} runs have finished (`{REPLICATION}`); no finding is "
                "drawn from it until it finishes, and the default stays as the normalisation study set it until then."]
    d = r["default"]
    verdict = (f"reco − grpo is confirmed at lr {' and '.join(lr_text(x) for x in d['confirmed_at'])}, so by the rule "
               "written before the runs the default stays." if d["stays"] else
               "reco − grpo is confirmed at neither lr, so by the rule written before the runs ReCo's default went back "
               "to per-group weights on every response: the normalisation study's gain did not replicate.")
    return [verdict, "", *[f"- {x['name']}: {ci(x)}, Holm p {x['p_holm']:.3f}." for x in r["family"]], "",
            f"Secondary (pre-registered, unadjusted; TOST at ±{r['design']['equivalence_margin']:g}; reco-response has "
            "GRPO's token ratio, reco-prompt each group's mean weight):", "",
            *[f"- {x['name']}: {ci(x)}, TOST p {x['p_tost']:.3f}; final Pass@1 {ci(x['final_pass_at_1'])}."
              for x in r["secondary"] if x.get("mean") is not None], "",
            f"Pooled with the normalisation study ({r['pooled'][0]['n'] if r['pooled'] else 0} seeds, exploratory):", "",
            *[f"- {x['name']}: {ci(x)}; final Pass@1 {ci(x['final_pass_at_1'])}." for x in r["pooled"]]]


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *["| " + " | ".join(r) + " |" for r in rows]]


def sources() -> dict:
    return {"cpu": load(CPU), "frontier": load(FRONTIER), "long": load(LONG), "fork": load(FORK),
            "control": load(CONTROL), "code": load(CODE), "norm": load(NORM), "replication": load(REPLICATION),
            "inertness": load(INERTNESS)}


def render(s: dict) -> str:
    import yaml

    reco_algo = yaml.safe_load((ROOT / RECO_CONFIG).read_text())["algo"]
    used = [p for p, key in ((CPU, "cpu"), (FRONTIER, "frontier"), (LONG, "long"), (FORK, "fork"), (CONTROL, "control"),
                             (CODE, "code"), (NORM, "norm"), (REPLICATION, "replication"), (INERTNESS, "inertness"))
            if s[key] is not None]
    out = [
        "# Findings: what this repository measured about ReCo",
        "",
        f"_Generated from {', '.join(f'`{p}`' for p in used)} by `python experiments/findings.py --write "
        "docs/findings.md`; rerun it rather than editing._",
        "",
        "Everything here ran on a CPU: a 2-layer character-level model trained from scratch on Countdown (and on two "
        "variants of it, countdown-long and code-tiny), not the paper's Qwen2.5-Math and Llama-3.1 on math. Section 5 "
        "says what transfers to the paper's regime. The designs, the statistics and every run are in "
        "[results.md](results.md); each study was pre-registered (its design, arms, seeds and test written down "
        "before any run) on its own page.",
        "",
        "**Terms.** *Pass@k*: the chance that at least one of k samples solves a problem. *Coverage at matched Pass@1* "
        "(the studies' primary statistic): the mean gap in Pass@256 (Pass@64 on the smaller tasks) between two runs "
        "over the range of Pass@1 that both runs' checkpoints reach, paired by seed, with its 95% CI; it compares "
        "coverage at the same first-try success, so a method cannot win it by learning less. *F-GRPO*: GRPO with each "
        "group's advantages scaled by (1 − its success rate)^γ. *Pass@k training*: GRPO with advantages that reward a "
        "group for solving a problem at least once in k tries. *group/all* (ReCo's default): w_i = (1/m_i) / (their mean over the "
        "response's group) on every response. *batch/positive* (the default from issue 52 to 59): w_i = (1/m_i) / "
        "(their mean over the rollout batch) on responses with A > 0, 1 elsewhere.",
        "",
        "## 1. GRPO concentrates on this task",
        "",
        headline.concentration_sentence(s["cpu"]),
        "",
        "## 2. What keeps coverage at matched Pass@1, and what does not",
        "",
        "Every comparison with GRPO that the studies ran, one line each, at the same learning rate unless the lr "
        "column names GRPO's (the early studies chose each arm's lr on a validation split). A pre-registered "
        "contrast reads **more** only where Holm's correction over its family confirms it; secondary and exploratory "
        "ones are unadjusted and say so.",
        "",
        *table(["method (form)", "lr", "statistic", "gap − GRPO (95% CI)", "reading", "study"], coverage_rows(s)),
        "",
        "What in batch/positive does the work:",
        "",
        *versus_rows(s),
        "",
        "How firm the normalisation study's confirmation of batch/positive is:",
        "",
        *robustness_lines(s),
        "",
        "## 3. The common mechanism: weight leaves the groups the policy already solves",
        "",
        "The share of each update's Σ_i |w_i·A_i| in hard (c ≤ G/4 correct), mid and easy (c ≥ 3G/4) groups, the "
        "mean over steps and seeds, and the final Pass@1:",
        "",
        *table(["arm", "lr", "hard", "mid", "easy", "final Pass@1", "study"], share_rows(s)),
        "",
        mechanism_sentence(s),
        "",
        "## 4. The price: first-try success at the last checkpoint",
        "",
        "The primary statistic compares coverage at matched first-try success; at the last checkpoint the methods that "
        "keep coverage can still solve fewer problems on the first try. Final Pass@1 gaps, 95% CI:",
        "",
        *price_lines(s),
        "",
        "## 5. What transfers to the paper's regime",
        "",
        "ReCo's response weight divides by m_i = 1 + (G − 1)·p_i, with p_i = π_old(y_i|x) = q_i^L for a response of L "
        "tokens whose mean per-token probability is q_i. Countdown's answers are a few characters long and repeat "
        "within a group, so p_i is large and the weights act. The paper's responses are hundreds to thousands of "
        "tokens long. The closed form (`experiments/inertness.py`):",
        "",
        *transfer_lines(s),
        "",
        "What follows either way: Countdown's gains from the response weight say little about math at 1,024 tokens. "
        "The paper-scale configs here use `occurrence: count` (a response's exact copies in its group), which does act "
        "when a policy repeats itself word for word, and the token term, which does not depend on length.",
        "",
        "## 6. The replication of batch/positive",
        "",
        "Pre-registered in [replication_study.md](replication_study.md): batch/positive, then the default, against GRPO on fresh seeds, "
        "with F-GRPO, its response weights under GRPO's token ratio, and its weights averaged per prompt beside it.",
        "",
        *replication_lines(s),
        "",
        "## 7. What to try at scale",
        "",
        "Each is a config in the repository (`torchrun --standalone --nproc_per_node=8 -m reco_scaled.train --config "
        "<file>`); the 1.5B configs are the cheapest:",
        "",
        "- `reco_scaled/configs/qwen2.5-math-1.5b-grpo.yaml`: the baseline every comparison needs, at the same lr.",
        "- `reco_scaled/configs/qwen2.5-math-1.5b-f-grpo.yaml`: F-GRPO, which kept coverage here as well as "
        "batch/positive did, with a higher final Pass@1.",
        f"- `{RECO_CONFIG}`: ReCo with `occurrence: {reco_algo['occurrence']}`, weights "
        f"{reco_algo['occurrence_norm']}/{reco_algo['occurrence_apply']}; "
        "`algo.occurrence_norm=batch algo.occurrence_apply=positive` runs batch/positive, and "
        "`algo.occurrence=sequence` the paper's literal weight, which section 5 predicts is inert "
        "(the log's `w_min = w_max = 1` shows it).",
        "- Measure before concluding: reco_mini and reco_scaled log `update_share_easy` (where the update goes), and "
        "every trainer, TRL and verl included, logs the response weights' range (`w_min` / `w_max`, `reco/w_*`): a "
        "weight that never moves cannot explain a result.",
        "",
        "To cite: the commit of this page and the study pages it links; every number above is recomputed by "
        "`python experiments/findings.py` from the committed JSON.",
    ]
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", default="", help="the page to write (docs/findings.md)")
    args = parser.parse_args(argv)
    text = render(sources())
    if args.write:
        Path(args.write).write_text(text)
        print(f"wrote {args.write}")
    else:
        print(text)
    return text


if __name__ == "__main__":
    main()
