"""experiments/control_study.py, the positive-control study (issue 42): its plan, family and readings on worked
inputs, the evaluation inside reco_mini's per-step hook leaving the training untouched, and the whole pipeline on a tiny
model: it runs, resumes from its archive and renders its block."""
from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
import lab  # noqa: E402  (files SimKO's token ratio in reco_mini, for good: before the snapshot below)

import reco_mini as rm  # noqa: E402

_REGISTRIES = (rm.METHODS, rm.TOKEN_RATIOS, rm.OCCURRENCES)
_BEFORE = [set(r) for r in _REGISTRIES]
import control_study as cs  # noqa: E402

# control_study imports fork_study, whose fork_arms registers the fork arms in reco_mini at import. None of the control
# study's arms is one of them, and other modules parametrize over reco_mini's registries at collection (after this
# import): the arms are removed again, and fork_arms is dropped from sys.modules so that test_fork_study registers its own.
for _registry, _names in zip(_REGISTRIES, _BEFORE):
    for _name in set(_registry) - _names:
        del _registry[_name]
for _module in ("fork_arms", "fork_study"):
    sys.modules.pop(_module, None)
from reco.tasks import TASKS  # noqa: E402
from reco.tasks.countdown import char_tokenizer, make_splits, tiny_model  # noqa: E402

PLAN = {"arms": list(cs.ARMS), "confirm": (500, 501), "where": (60,), "base_sha256": "ab" * 32, "lrs": cs.LRS,
        "select": (40, 41)}


def test_each_arm_runs_at_its_lr_and_at_grpo_s():
    choices = {a: 1e-4 for a in cs.ARMS} | {"ucpo": 5e-5, "simko": 2e-4}
    specs = cs.confirm_specs(PLAN, choices)
    runs = {(s["arm"], s["lr"]) for s in specs}
    assert runs == {(a, 1e-4) for a in cs.ARMS} | {("ucpo", 5e-5), ("simko", 2e-4)}
    assert len(specs) == len(runs) * 2 and all(s["split"] == "test" for s in specs)
    family = cs.contrasts(PLAN, choices)
    assert [r["name"] for r in family if r["arm"] == "ucpo"] == ["ucpo @ its selected lr", "ucpo @ grpo's lr"]
    assert [r["name"] for r in family if r["arm"] == "reco"] == ["reco @ its lr = grpo's"]
    assert len(family) == len(cs.ARMS) - 1 + 2 and all(r["reference_lr"] == 1e-4 for r in family)
    assert {s["arm"] for s in cs.where_specs(PLAN, choices)} == set(cs.WHERE_ARMS)


def _summary(means: dict, confirmed: set) -> dict:
    family = [{"name": f"{a} @ its lr = grpo's", "arm": a, "lr": 1e-4, "reference_lr": 1e-4, "n": 8, "mean": m,
               "ci_low": m - 0.05, "ci_high": m + 0.05, "confirmed": a in confirmed, "equivalent": False}
              for a, m in means.items()]
    return {"partial": False, "family": family, "positive_controls": sorted(confirmed), "design": {"k": 256}}


def test_the_answer_reads_from_the_family():
    none = cs.claims(_summary({"ucpo": 0.01, "simko": -0.08}, set()))
    assert none[0].startswith("**No positive control:**") and "say little about the paper's claim" in none[0]
    assert "CI lies below zero" in none[2] and "a null, not evidence of no effect" in none[1]
    found = cs.claims(_summary({"ucpo": 0.09, "simko": -0.08}, {"ucpo"}))
    assert found[0].startswith("**Positive control found:** ucpo") and "confirmed (Holm p < 0.05)" in found[1]
    assert cs.claims({"partial": True, "family": []}) == ["The study is partial: no answer is drawn from it yet."]
    split = _summary({"ucpo": 0.09, "simko": 0.08}, {"ucpo", "simko"})
    split["family"][1] |= {"name": "simko @ its selected lr", "lr": 5e-5}
    assert cs.confirmed_at_grpo_lr(split) == ["ucpo"]
    assert ("At grpo's lr, where the contrast does not change the lr: ucpo; only at its own selected lr, where the "
            "contrast also changes the lr: simko." in cs.claims(split)[0])


def _run(arm: str, lr: float, seed: int, curve: list[tuple[float, float]]) -> dict:
    trajectory = [{"step": 10 * (i + 1), "pass_at_k": {"1": p, "256": v}} for i, (p, v) in enumerate(curve)]
    return {"spec": {"arm": arm, "lr": lr, "seed": seed}, "trajectory": trajectory, "wall_time_s": 60.0}


def _lr_runs(seeds: tuple[int, int]) -> tuple[list[dict], list[dict]]:
    """Over Pass@1 0.1 to 0.3 (worked by hand): grpo at 5e-5 lies 0.2 above grpo at 2e-4 on each seed; f-grpo at 5e-5
    lies 0.1 above grpo at 5e-5 on the first seed, and on the second, over 0.1 to 0.2, its gap falls from 0.2 (0.9 against
    0.7) to 0.0 (0.6 against 0.6), a mean of 0.1. ucpo runs at grpo's lr. Returns (grpo at 5e-5, every other run)."""
    a, b = seeds
    at_5e5 = [_run("grpo", 5e-5, s, [(0.1, 0.7), (0.3, 0.5)]) for s in seeds]
    others = [_run("grpo", 2e-4, s, [(0.1, 0.5), (0.3, 0.3)]) for s in seeds]
    others += [_run("f-grpo", 5e-5, a, [(0.1, 0.8), (0.3, 0.6)]), _run("f-grpo", 5e-5, b, [(0.1, 0.9), (0.2, 0.6)])]
    return at_5e5, others + [_run("ucpo", 2e-4, s, [(0.1, 0.9), (0.3, 0.9)]) for s in seeds]


LR_CHOICES = {"grpo": 2e-4, "f-grpo": 5e-5, "ucpo": 2e-4}


def test_the_lr_effects_read_the_selection_runs_at_each_selected_lr():
    at_5e5, others = _lr_runs((40, 41))
    effects = cs.lr_effects(at_5e5 + others, LR_CHOICES, "256")
    assert set(effects) == {"grpo @ 5e-05 - grpo @ 0.0002", "f-grpo @ 5e-05 - grpo @ 5e-05"}  # ucpo: at grpo's lr
    assert effects["grpo @ 5e-05 - grpo @ 0.0002"]["per_seed"] == pytest.approx({"40": 0.2, "41": 0.2})
    assert effects["f-grpo @ 5e-05 - grpo @ 5e-05"]["per_seed"] == pytest.approx({"40": 0.1, "41": 0.1})


def test_reco_is_compared_with_each_positive_control_that_is_not_a_form_of_reco():
    choices = {"grpo": 2e-4, "f-grpo": 5e-5, "reco": 5e-5, "reco-positive": 2e-4}
    line = {seed: [(0.1, 0.5), (0.3, 0.3)] for seed in (500, 501)}
    lower = {seed: [(0.1, 0.4), (0.3, 0.2)] for seed in (500, 501)}  # 0.1 below `line` over the whole range
    curves = {"f-grpo@0.0002": line, "f-grpo@5e-05": line, "reco@0.0002": lower, "reco@5e-05": lower,
              "reco-positive@0.0002": line}
    versus = cs.reco_vs_controls(["f-grpo", "reco"], choices, curves)
    assert set(versus) == {"reco@0.0002 - f-grpo@0.0002", "reco@5e-05 - f-grpo@5e-05", "reco-positive@0.0002 - f-grpo@0.0002",
                           "reco-positive@0.0002 - f-grpo@5e-05"}  # reco, a positive control too, is not a reference
    assert versus["reco@5e-05 - f-grpo@5e-05"]["per_seed"] == pytest.approx({"500": -0.1, "501": -0.1})
    assert versus["reco-positive@0.0002 - f-grpo@5e-05"]["per_seed"] == pytest.approx({"500": 0.0, "501": 0.0})


def test_amendment_2_runs_grpo_at_each_other_selected_lr_after_both_families(tmp_path):
    choices = LR_CHOICES | {"reco": 5e-5, "simko": 1e-4}
    plan = PLAN | {"steps": 120, "eval_steps": cs.EVAL_STEPS, "n_eval": 256}
    specs = cs.matched_specs(plan, choices)
    assert {(s["phase"], s["arm"], s["lr"], s["seed"], s["split"]) for s in specs} == {
        ("matched", "grpo", lr, seed, "test") for lr in (5e-5, 1e-4) for seed in (500, 501)} and len(specs) == 4
    assert cs.matched_specs(plan, {a: 2e-4 for a in choices}) == []  # every arm at grpo's lr: nothing to match
    # the budget: 4 runs of 120 steps at 1 s and 8 evaluations at 10 s, 200 s each: 800 s in all
    timing = {"arms": {"grpo": {"s_per_step": 1.0}}, "s_per_eval_n256": 10.0}
    first, code = tmp_path / "first.json", tmp_path / "code.json"

    def summary(path: Path, partial: bool, hours: float) -> Path:
        path.write_text(json.dumps({"partial": partial, "compute": {"run_time_s": hours * 3600}}))
        return path
    assert "countdown family has not finished" in cs.matched_budget_check(plan, timing, first, code, choices)
    summary(first, False, 10.0)
    assert "code-tiny family has not finished" in cs.matched_budget_check(plan, timing, first, summary(code, True, 0), choices)
    assert cs.matched_budget_check(plan, timing, first, summary(code, False, 1.0), choices) is None
    summary(first, False, 20.0 - 1.0 - 800 / 3600 + 0.01)
    assert "it does not fit" in cs.matched_budget_check(plan, timing, first, code, choices)
    with pytest.raises(SystemExit, match="countdown family's amendment 2"):
        cs.main(["--family", "code-tiny", "--phases", "matched", "--out", str(tmp_path / "r")])


def test_amendment_2_compares_each_arm_with_grpo_at_its_own_lr():
    at_5e5, others = _lr_runs((500, 501))
    plan = PLAN | {"k": "256"}
    matched = cs.lr_matched(others, at_5e5[:1], LR_CHOICES, plan)
    assert matched["partial"] and (matched["runs"], matched["runs_planned"]) == (1, 2)  # grpo at 5e-5 on 2 seeds
    assert matched["contrasts"]["f-grpo @ 5e-05 - grpo @ 5e-05"]["per_seed"] == pytest.approx({"500": 0.1})
    matched = cs.lr_matched(others, at_5e5, LR_CHOICES, plan)
    assert not matched["partial"] and matched["run_time_s"] == 120.0
    assert set(matched["contrasts"]) == {"f-grpo @ 5e-05 - grpo @ 5e-05", "grpo @ 5e-05 - grpo @ 0.0002"}
    assert matched["contrasts"]["grpo @ 5e-05 - grpo @ 0.0002"]["mean"] == pytest.approx(0.2)
    assert matched["contrasts"]["f-grpo @ 5e-05 - grpo @ 5e-05"]["final"]["mean"] == pytest.approx(0.1)  # 0.6 - 0.5 on each seed


def test_where_summary_finds_the_half_loss_step_and_each_set_s_loss():
    def run(seed, val, trained):
        rows = [{"step": s, "set": "val", "pass_at_k": {"1": 0.1, "256": v}} for s, v in val.items()]
        rows += [{"step": s, "set": "trained", "pass_at_k": {"1": 0.1, "256": v}} for s, v in trained.items()]
        return {"spec": {"arm": "grpo", "seed": seed}, "trajectory": rows}
    runs = [run(60, {0: 0.9, 1: 0.8, 4: 0.6, 120: 0.5}, {0: 1.0, 120: 0.6}),
            run(61, {0: 0.9, 1: 0.8, 4: 0.7, 120: 0.5}, {0: 0.8, 120: 0.6})]
    out = cs.where_summary(runs, "256")["grpo"]
    assert out["by_step"]["val"]["4"]["pass_at_256"] == pytest.approx(0.65)
    assert out["half_of_val_loss_by_step"] == 4  # 0.9 -> 0.5: half the loss (0.2) is reached at step 4
    assert out["loss_first_to_last"] == pytest.approx({"val": 0.4, "trained": 0.3})


def test_the_task_rule_chooses_the_larger_collapse_from_the_committed_studies():
    choice = cs.task_choice()
    assert choice["chosen"] == "countdown" and choice["rule"] == cs.TASK_RULE
    for t in choice["tasks"].values():
        assert 0 < t["grpo_step_120"] < t["base"] <= 1 and t["collapse"] == pytest.approx(t["base"] - t["grpo_step_120"])
    assert str(list(cs.LRS)) in cs.SELECTION_RULE and f"Pass@{cs.K}" in cs.SELECTION_RULE


@pytest.mark.slow
def test_evaluating_inside_the_hook_leaves_the_training_untouched(tmp_path, monkeypatch):
    """The study evaluates in lab.train_rl's per-step hook; the rows and weights must be those of a run without it."""
    monkeypatch.setattr(TASKS["countdown"], "reward", lambda problem, text: float(len(text) % 3 == 0))
    cfg = lab.parse_config(["--method", "grpo", "--steps", "3", "--prompts-per-step", "4", "--group-size", "4",
                            "--n-train", "16", "--n-test", "4", "--n-eval", "4"])
    tok = char_tokenizer(cfg.task)
    splits = make_splits(cfg)
    torch.manual_seed(0)
    base = tiny_model(tok, 32, 2)
    runs = {}
    for name in ("plain", "evaluating"):
        model = tiny_model(tok, 32, 2)
        model.load_state_dict(base.state_dict())
        (tmp_path / name).mkdir()
        hook = (lambda step, m=model: rm.evaluate(cfg, m, tok, splits["val"], "hook") and {}) if name == "evaluating" else None
        lab.train_rl(cfg, "grpo", model, None, tok, splits["train"], tmp_path / name, on_step=hook)
        rows = [{k: v for k, v in json.loads(line).items() if not k.startswith("time_")}
                for line in (tmp_path / name / "log.jsonl").read_text().splitlines()]
        runs[name] = rows, model.state_dict()
    assert runs["plain"][0] == runs["evaluating"][0]
    assert all(torch.equal(a, b) for a, b in zip(runs["plain"][1].values(), runs["evaluating"][1].values()))


@pytest.mark.slow
def test_quick_study_end_to_end_resumes_and_renders(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the tiny base's cache, runs/cache, goes here
    out, results = tmp_path / "runs", tmp_path / "q.json"
    args = ["--quick", "--out", str(out), "--results", str(results)]
    summary = cs.main(args)
    assert not summary["partial"] and summary["compute"]["runs"] == summary["compute"]["runs_planned"]
    assert summary["compute"]["runs_this_invocation"] == summary["compute"]["runs"]
    choices = summary["selection"]["choices"]
    assert set(choices) == set(cs.ARMS) and len(summary["family"]) >= len(cs.ARMS) - 1
    run = json.loads(next(out.glob("base-*/confirm/simko/*/seed500/result.json")).read_text())
    assert [row["step"] for row in run["trajectory"]] == list(cs.QUICK["eval_steps"])  # the hook's steps, then the last
    where = json.loads(next(out.glob("base-*/where/grpo/*/seed60/result.json")).read_text())
    assert {(row["step"], row["set"]) for row in where["trajectory"]} == {
        (s, name) for s in cs.QUICK["where_steps"] for name in ("val", "trained")}
    assert set(summary["where"]) == set(cs.WHERE_ARMS)
    # resume: a lost run comes back from the archive; a fresh checkout restores every run
    lost = next(out.glob("base-*/confirm/grpo/*/seed501/result.json"))
    lost.unlink()
    assert cs.main(args)["compute"]["runs_this_invocation"] == 0 and lost.exists()
    shutil.rmtree(out / next(out.glob("base-*")).name)
    assert cs.main(args)["compute"]["runs_this_invocation"] == 0
    status = cs.main(args + ["--status"])
    assert all(v["done"] == v["planned"] for k, v in status.items() if isinstance(v, dict))
    # a study stopped in its first invocation has runs but no archive: the summary finds them on the base they ran on
    results.with_name("q_runs.jsonl.gz").unlink()
    assert cs.main(args + ["--aggregate-only"])["compute"]["runs"] == summary["compute"]["runs"]
    assert all(v["done"] == v["planned"] for v in cs.main(args + ["--status"]).values() if isinstance(v, dict))
    block = cs.render_block(summary, "q.json", "q.png")
    assert "Answer and family" in block and "PARTIAL" not in block and "Where (grpo" in block
    # amendment 2 runs when named, after both families: grpo at each other selected lr. The tiny selection gives every
    # arm one lr here, so f-grpo is made to select the other one (its confirmation runs there run too)
    code = tmp_path / "code.json"
    code.write_text(json.dumps({"partial": False, "compute": {"run_time_s": 0.0}}))
    timing = {"arms": {a: {"s_per_step": 0.01} for a in cs.ARMS}, "s_per_eval_n8": 0.01}
    results.with_name("q_timing.json").write_text(json.dumps(timing))
    other = next(lr for lr in cs.QUICK["lrs"] if lr != choices["grpo"])
    choose = cs.choose
    monkeypatch.setattr(cs, "choose", lambda plan, base_val: (lambda out: out | {
        "choices": out["choices"] | {"f-grpo": other}})(choose(plan, base_val)))
    matched = cs.main(args + ["--phases", "confirm,matched", "--code-summary", str(code)])
    assert matched["lr_matched"]["runs"] == matched["lr_matched"]["runs_planned"] == len(cs.QUICK["confirm"])
    assert set(matched["lr_matched"]["contrasts"]) == {f"f-grpo @ {other:g} - grpo @ {other:g}",
                                                      f"grpo @ {other:g} - grpo @ {choices['grpo']:g}"}
    assert "Exploratory, amendment 2" in cs.render_block(matched, "q.json", "q.png")


@pytest.mark.parametrize("family", list(cs.FILES))
def test_the_committed_block_is_the_render_of_the_committed_summary(family):
    stem, _, (begin, end) = cs.FILES[family]
    summary = json.loads((ROOT / "results" / f"{stem}.json").read_text())
    text = (ROOT / "docs" / "results.md").read_text()
    block = text.split(begin, 1)[1].split(end, 1)[0].strip()
    assert block == cs.render_block(summary, f"results/{stem}.json", f"../results/{stem}.png").strip()
    assert ("PARTIAL: the study has not finished" in block or "Not run" in block) == summary["partial"]
    matched = summary.get("lr_matched") or {}  # amendment 2 says so of its own runs
    assert ("**PARTIAL:**" in block) == bool(matched.get("runs_planned") and matched["partial"])
    assert summary["design"].get("family", "countdown") == family  # a summary written before amendment 1 has no family


# The second family (amendment 1): code-tiny, every arm at grpo's selected lr, after the first family and within its budget

CODE_PLAN = PLAN | cs.CODE


def test_the_code_family_selects_grpo_s_lr_alone_and_runs_every_arm_at_it():
    assert {s["arm"] for s in cs.select_specs(CODE_PLAN)} == {"grpo"}
    assert len(cs.select_specs(CODE_PLAN)) == len(cs.LRS) * 2 and len(cs.select_specs(PLAN)) == len(cs.LRS) * 2 * len(cs.ARMS)
    assert cs.arm_lrs(CODE_PLAN, {}) == {}  # not known before grpo's selection has finished
    choices = cs.arm_lrs(CODE_PLAN, {"grpo": 5e-5})
    assert choices == {a: 5e-5 for a in cs.ARMS}
    assert {(s["arm"], s["lr"]) for s in cs.confirm_specs(CODE_PLAN, choices)} == {(a, 5e-5) for a in cs.ARMS}
    family = cs.contrasts(CODE_PLAN, choices)
    assert [r["name"] for r in family] == [f"{a} @ grpo's lr" for a in cs.ARMS if a != "grpo"]
    assert cs.where_specs(CODE_PLAN, choices) == []
    assert cs.arm_lrs(PLAN, {"grpo": 5e-5, "ucpo": 1e-4}) == {"grpo": 5e-5, "ucpo": 1e-4}  # the first family: unchanged
    # the summary's rule texts name the family's own stall step, RL steps and k
    first = PLAN | {"stall_after": 40, "steps": 120, "k": "256"}
    stall, select = cs.in_family(cs.fs.STALL_RULE, CODE_PLAN), cs.in_family(cs.SELECTION_RULE, CODE_PLAN)
    assert "step >= 10 " in stall and "step >= 40" not in stall and "step >= 10 " in select
    assert "(step 20)" in select and "Pass@64" in select and "Pass@256" not in select
    assert cs.in_family(cs.SELECTION_RULE, first) == cs.SELECTION_RULE and cs.in_family(cs.PRIMARY, first) == cs.PRIMARY


def test_the_code_family_runs_only_after_the_first_and_within_what_it_left(tmp_path):
    timing = {"arms": {a: {"s_per_step": 1.0} for a in cs.ARMS}, "s_per_eval_n64": 10.0}
    projected = cs.projected_hours(timing, CODE_PLAN)
    # 2 base evaluations; 10 selection runs and 8 arms x 2 seeds of confirmation runs, each 20 steps and 4 evaluations
    assert projected == pytest.approx((2 * 10 + (10 + 16) * (20 + 4 * 10)) / 3600)
    first = tmp_path / "control_study.json"
    assert "run --timing --family code-tiny" in cs.code_budget_check(CODE_PLAN, None, first)
    assert "no summary of the countdown family" in cs.code_budget_check(CODE_PLAN, timing, first)
    first.write_text(json.dumps({"partial": True, "compute": {"run_time_s": 3600.0}}))
    assert "has not finished" in cs.code_budget_check(CODE_PLAN, timing, first)
    spent = (cs.BUDGET_HOURS - projected) * 3600
    first.write_text(json.dumps({"partial": False, "compute": {"run_time_s": spent - 1}}))
    assert cs.code_budget_check(CODE_PLAN, timing, first) is None
    first.write_text(json.dumps({"partial": False, "compute": {"run_time_s": spent + 1}}))
    assert "does not fit, so it does not run" in cs.code_budget_check(CODE_PLAN, timing, first)
    (tmp_path / "code_timing.json").write_text(json.dumps(timing))  # read by main beside its --results
    with pytest.raises(SystemExit, match="does not fit"):
        cs.main(["--family", "code-tiny", "--after", str(first), "--out", str(tmp_path / "runs"),
                 "--results", str(tmp_path / "code.json")])
    assert not (tmp_path / "runs").exists()  # refused before any work


@pytest.mark.slow
def test_quick_code_family_end_to_end(tmp_path, monkeypatch):
    """The whole second family on a tiny code-tiny model, graded in reco.rewards.code's sandbox."""
    monkeypatch.chdir(tmp_path)
    out, results = tmp_path / "runs", tmp_path / "c.json"
    summary = cs.main(["--family", "code-tiny", "--quick", "--out", str(out), "--results", str(results)])
    assert not summary["partial"] and summary["compute"]["runs"] == summary["compute"]["runs_planned"] == 2 + 2 + 8 * 2
    assert summary["design"]["task_flags"] == ["--task", "code-tiny"] and summary["design"]["family"] == "code-tiny"
    assert set(summary["selection"]["choices"]) == {"grpo"} and len(summary["family"]) == len(cs.ARMS) - 1
    run = json.loads(next(out.glob("base-*/confirm/ucpo/*/seed501/result.json")).read_text())
    assert [row["step"] for row in run["trajectory"]] == list(cs.CODE_QUICK["eval_steps"])
    block = cs.render_block(summary, "c.json", "c.png")
    assert "Task: code-tiny, the second family" in block and "every arm runs at grpo's lr" in block
