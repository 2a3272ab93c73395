"""Issue 52 moved reco_mini's response-weight defaults to --occurrence-norm batch --occurrence-apply positive, and
issue 59's replication moved them back (group, all). Every committed study before the replication ran ReCo with
group/all, so each study's runner puts lab.STUDY_PINS before the arm's
own flags: every arm of every study trains with the settings it was run with, and an arm that sets a flag itself (the
normalisation study's batch arms, the positive-only arms) keeps it. The runs are keyed by spec, not by flags, so the
committed run directories still count as done. Each runner is stopped at its parse_config (nothing trains here)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "experiments"))
import control_study as cs  # noqa: E402
import cpu_study  # noqa: E402
import fork_study  # noqa: E402
import frontier_study  # noqa: E402
import lab  # noqa: E402
import long_study as ls  # noqa: E402
import norm_study  # noqa: E402

OLD = ("group", "all")


def expected(extra: list[str]) -> tuple[str, str]:
    """(occurrence_norm, occurrence_apply) an arm ran with: its own flags, else the old defaults."""
    norm = extra[extra.index("--occurrence-norm") + 1] if "--occurrence-norm" in extra else OLD[0]
    apply = extra[extra.index("--occurrence-apply") + 1] if "--occurrence-apply" in extra else OLD[1]
    return norm, apply


class Stop(Exception):
    pass


@pytest.fixture
def captured(monkeypatch):
    """lab.parse_config as the runners call it: the Config of the first training run's flags, then Stop."""
    real, got = lab.parse_config, []

    def parse(argv):
        if "--method" in argv:
            got.append(real(argv))
            raise Stop
        return real(argv)

    monkeypatch.setattr(lab, "parse_config", parse)
    for module in (ls, cpu_study, frontier_study):
        monkeypatch.setattr(module, "_CTX", {"base": None, "tokenizer": None, "splits": {}})
    return got


def settings(cfg) -> tuple[str, str]:
    return cfg.occurrence_norm, cfg.occurrence_apply


def test_the_norm_study_arms_keep_their_meaning(captured, tmp_path):
    plan = {"out": str(tmp_path), "task_flags": [], "flags": [], "n_eval": 8, "steps": 3}
    meaning = {"grpo": OLD, "f-grpo": OLD, "f-grpo-g0.5": OLD, "reco": ("group", "all"), "reco-batch": ("batch", "all"),
               "reco-positive-batch": ("batch", "positive"), "reco-response-batch": ("batch", "all")}
    assert set(meaning) == set(norm_study.ALL_ARMS)
    for arm, want in meaning.items():
        with pytest.raises(Stop):
            norm_study._run({"phase": "confirm", "arm": arm, "lr": 1e-4, "seed": 700, "split": "test"}, plan)
        assert settings(captured[-1]) == want, arm
    assert norm_study.ARMS["reco"] == ("reco", [])  # the recorded design is unchanged: the pins live in the runner


@pytest.mark.parametrize("name, arms, run", [
    ("control", cs.ARMS, lambda spec, plan: cs._run(spec, plan)),
    ("long", ls.ARMS, lambda spec, plan: ls._run(spec, plan)),
    # the fork study's _run: long_study's run_one with its arms (after setting the detected arm's detector)
    ("fork", fork_study.ARMS, lambda spec, plan: ls.run_one(spec, plan, ls._CTX, arms=fork_study.ARMS)),
])
def test_every_study_arm_trains_with_the_settings_it_ran_with(captured, tmp_path, name, arms, run):
    plan = {"out": str(tmp_path), "task_flags": [], "flags": [], "n_eval": 8, "steps": 3, "eval_every": 3}
    for arm, (method, extra) in arms.items():
        with pytest.raises(Stop):
            run({"phase": "confirm", "arm": arm, "lr": 1e-4, "seed": 1, "split": "test"}, plan)
        assert captured[-1].method_list == [method] and settings(captured[-1]) == expected(extra), (name, arm)


def test_frontier_and_cpu_study_arms_train_with_the_settings_they_ran_with(captured, tmp_path):
    plan = {"out": str(tmp_path), "flags": [], "steps": 3}
    for method, (_, extra) in frontier_study.METHODS.items():
        spec = {"phase": "confirm", "method": method, "lr": 1e-4, "clip": 1.0, "seed": 1, "split": "test",
                "eval_every": 3}
        with pytest.raises(Stop):
            frontier_study._run(spec, plan)
        assert settings(captured[-1]) == expected(extra), method
    for variant, (method, extra) in cpu_study.VARIANTS.items():
        if method is not None:
            assert settings(cpu_study.run_config(variant, 0, [], tmp_path)) == expected(extra), variant
    assert ("group", "positive") in {expected(extra) for _, extra in cpu_study.VARIANTS.values()}
