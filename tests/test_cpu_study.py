"""experiments/cpu_study.py: the quick study end to end (schema, CIs, resume, README block) and its statistics."""
import importlib.util
import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("cpu_study", ROOT / "experiments" / "cpu_study.py")
cpu_study = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cpu_study)

T975_N2 = 12.706  # t_{0.975, 1} from a printed t-table: two seeds -> one degree of freedom
STATS_KEYS = {"mean", "std", "ci95", "n", "values"}
README = "# Title\n\nbefore\n<!-- cpu-study:begin -->\nstale text\n<!-- cpu-study:end -->\nafter\n"


def run_files(root: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.name in ("result.json", "log.jsonl", "model.pt")}


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """The quick study run twice in a fresh directory: the second call must only re-aggregate (and fill a README)."""
    root = tmp_path_factory.mktemp("cpu_study")
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root)  # reco_mini caches the SFT base under ./runs/cache
        first = cpu_study.main(["--quick", "--out", "study"])
        before = run_files(root / "study")
        (root / "README.md").write_text(README)
        second = cpu_study.main(["--quick", "--out", "study", "--write-readme", "README.md"])
        after = run_files(root / "study")
    return SimpleNamespace(root=root, first=first, second=second, before=before, after=after,
                           summary=json.loads((root / "study" / "cpu_study.json").read_text()))


def all_stats(summary: dict):
    """(label, stats) for every mean/CI entry of the per-variant and paired tables."""
    for table in ("variants", "paired_differences"):
        for name, res in summary[table].items():
            for k, stats in res["pass_at_k"].items():
                yield f"{table}/{name}/pass@{k}", stats
            for key in (*cpu_study.SCALARS, "entropy_final", "kl_base_final"):
                if res[key] is not None:
                    yield f"{table}/{name}/{key}", res[key]


@pytest.mark.slow
def test_schema(study):
    s = study.summary
    assert set(s["variants"]) == {"base", "grpo", "reco"} and s["ks"] == [1, 4, 16]
    assert s["study"]["seeds"] == [0, 1] and s["study"]["config"]["quick"] and s["study"]["notes"]
    for name, res in s["variants"].items():
        assert res["n_seeds"] == 2 and res["seeds"] == [0, 1]
        assert set(res["pass_at_k"]) == {"1", "4", "16"}
        assert all(set(res[key]) == STATS_KEYS for key in cpu_study.SCALARS)
        assert (res["entropy_final"] is None) == (name == "base") == (res["kl_base_final"] is None)
    assert set(s["paired_differences"]) == {"base - grpo", "reco - grpo"}
    steps = s["study"]["config"]["steps"]
    assert set(s["stability"]) == {"grpo", "reco"}
    for name, stab in s["stability"].items():
        traj = stab["trajectories"]
        assert {"reward_mean", "kl_base", "w_min", "w_max", "clip_frac_low", "clip_frac_high", "grad_norm"} <= set(traj)
        assert ("rho_mean" in traj) == ("rho_max" in traj) == (name == "reco")  # GRPO has no variance ratio
        assert all(len(v) == steps for v in traj.values())
        assert set(stab["divergence"]) == {"0", "1"} and stab["n_diverged"] == 0
        ext = stab["extremes"]
        assert (ext["rho_max"] is None) == (name == "grpo") and ext["grad_norm_mean"] >= 0  # quick: often all A = 0
        assert 0 <= ext["grad_clip_active_frac"] <= 1
        assert all(isinstance(f["diverged"], bool) and f["stopped"] is None for f in stab["divergence"].values())
    per_run = s["wall_time_s"]["per_run"]
    assert set(per_run) == set(s["variants"]) and s["wall_time_s"]["total"] > 0
    for name in s["variants"]:
        run = json.loads((study.root / "study" / name / "seed0" / "result.json").read_text())
        assert run["config"]["seed"] == 0 and "counts" in run["eval"]
    assert (study.root / "study" / "reco" / "seed1" / "log.jsonl").exists()
    png = study.root / "study" / "cpu_study.png"
    assert 1000 < png.stat().st_size < 200_000


@pytest.mark.slow
def test_cis_equal_a_hand_computation_from_the_per_seed_values(study):
    entries = list(all_stats(study.summary))
    assert len(entries) > 20
    for label, stats in entries:
        x0, x1 = stats["values"]
        std = abs(x0 - x1) / math.sqrt(2)  # sample std of two numbers
        assert stats["n"] == 2 and stats["mean"] == pytest.approx((x0 + x1) / 2, abs=1e-12), label
        assert stats["std"] == pytest.approx(std, abs=1e-12), label
        assert math.isfinite(stats["ci95"]) and stats["ci95"] >= 0, label
        assert stats["ci95"] == pytest.approx(T975_N2 * std / math.sqrt(2), abs=1e-12), label
    # the training-side measures differ between seeds, so at least those CIs are not trivially zero
    assert study.summary["variants"]["grpo"]["entropy_final"]["ci95"] > 0
    # paired differences are per-seed differences of the per-variant values
    v, d = study.summary["variants"], study.summary["paired_differences"]["reco - grpo"]
    for k in ("1", "16"):
        expect = [a - b for a, b in zip(v["reco"]["pass_at_k"][k]["values"], v["grpo"]["pass_at_k"][k]["values"])]
        assert d["pass_at_k"][k]["values"] == pytest.approx(expect, abs=1e-12)


@pytest.mark.slow
def test_resume_skips_finished_runs(study):
    assert (study.first["ran"], study.first["skipped"]) == (6, 0)
    assert (study.second["ran"], study.second["skipped"]) == (0, 6)
    assert study.before and study.after == study.before  # no run file rewritten


@pytest.mark.slow
def test_resume_refuses_runs_made_with_other_settings(study, monkeypatch):
    monkeypatch.chdir(study.root)
    with pytest.raises(SystemExit, match="other settings \\(lr\\)"):
        cpu_study.main(["--quick", "--out", "study", "--extra-args", "--lr 1e-3"])


@pytest.mark.slow
def test_readme_block_fills_the_markers(study):
    text = (study.root / "README.md").read_text()
    assert text.startswith("# Title\n\nbefore\n<!-- cpu-study:begin -->\n") and text.endswith("<!-- cpu-study:end -->\nafter\n")
    assert text.count(cpu_study.BEGIN) == text.count(cpu_study.END) == 1 and "stale text" not in text
    block = text.split(cpu_study.BEGIN)[1].split(cpu_study.END)[0]
    assert block.strip() == cpu_study.render_readme(study.summary, "study/cpu_study.png").strip()
    assert "| variant | Pass@1 | Pass@4 | Pass@16 |" in block and "| reco - grpo |" in block
    for claim in ("**Concentration.**", "**Coverage.**", "**Pass@1.**", "**Which fix does the work.**", "**Stability.**"):
        assert claim in block
    assert "![Pass@k and training curves](study/cpu_study.png)" in block


def test_write_readme_needs_the_markers(tmp_path):
    path = tmp_path / "README.md"
    path.write_text("# no markers\n")
    with pytest.raises(SystemExit, match="markers"):
        cpu_study.write_readme(path, "block")


def test_divergence_flags():
    rows = lambda rewards: [{"reward_mean": r, "kl_base": 0.0} for r in rewards]
    assert not cpu_study.divergence(rows([0.1 * i for i in range(30)]), None)["diverged"]
    collapsed = cpu_study.divergence(rows([0.8] * 20 + [0.3] * 10), None)
    assert collapsed["reward_collapse"] and collapsed["diverged"]
    assert not cpu_study.divergence(rows([0.8] * 20 + [0.5] * 10), None)["diverged"]  # a 37% drop is not a collapse
    assert cpu_study.divergence([{"reward_mean": 0.5, "kl_base": float("nan")}], None)["non_finite"]
    assert cpu_study.divergence([], "error: non-finite loss")["diverged"]


def test_extremes_by_hand():
    logs = {0: [{"grad_norm": 0.5, "rho_max": 2.0}, {"grad_norm": 1.5, "rho_max": 4.0}],
            1: [{"grad_norm": 2.0, "rho_max": 3.0}, {"grad_norm": 1.0, "rho_max": 1.0}]}
    assert cpu_study.extremes(logs, 1.0) == {"rho_max": 4.0, "grad_norm_mean": 1.25, "grad_clip_active_frac": 0.5}
    assert cpu_study.extremes({0: [{"grad_norm": 0.2}]}, 1.0)["rho_max"] is None  # GRPO logs no rho


def synthetic_summary(base: list[float], grpo: list[float], reco: list[float], **more: list[float]) -> dict:
    """A summary with Pass@1 and Pass@256 per seed for base, grpo, reco and any `more` variants (Pass@1 is the
    same for all)."""
    runs = {name: {s: {"pass@1": 0.3, "pass@256": x} for s, x in enumerate(vals)}
            for name, vals in (("base", base), ("grpo", grpo), ("reco", reco), *more.items())}
    paired = {f"{n} - grpo": cpu_study.measure_stats({s: {k: x - runs["grpo"][s][k] for k, x in m.items()}
                                                      for s, m in runs[n].items()}) for n in runs if n != "grpo"}
    return {"variants": {n: cpu_study.measure_stats(r) for n, r in runs.items()}, "paired_differences": paired,
            "stability": {}, "ks": [1, 256]}


def test_claims_follow_the_numbers():
    text = " ".join(cpu_study.claims(synthetic_summary([0.95, 0.94, 0.96], [0.80, 0.82, 0.81], [0.90, 0.91, 0.89])))
    assert "Concentration is reproduced" in text and "ReCo recovers coverage" in text
    assert "Pass@1 is not distinguishable from GRPO's" in text
    assert "Not answered yet: no single-fix variant" in text  # only reco was run: the question was not asked
    assert "Other settings" not in text
    # one single fix whose gain is clear, one whose CI straddles zero
    text = " ".join(cpu_study.claims(synthetic_summary(
        [0.95, 0.94, 0.96], [0.80, 0.82, 0.81], [0.90, 0.91, 0.89],
        **{"reco-token": [0.85, 0.86, 0.84], "reco-response": [0.70, 0.90, 0.80]})))
    assert "The token-level fix alone raises Pass@256 over GRPO" in text
    assert "reco-token − GRPO = +0.040 ± 0.025 (its 95% CI lies above zero)" in text
    assert "reco-response − GRPO = -0.010" in text and "(its 95% CI includes zero)" in text
    # neither single fix helps but both together do; a switch variant clears zero and costs Pass@1
    summary = synthetic_summary([0.95, 0.94, 0.96], [0.80, 0.82, 0.81], [0.90, 0.91, 0.89],
                                **{"reco-token": [0.70, 0.90, 0.80], "reco-response": [0.81, 0.83, 0.80],
                                   "reco+apply-positive": [0.90, 0.92, 0.91]})
    summary["paired_differences"]["reco+apply-positive - grpo"]["pass_at_k"]["1"] = cpu_study.summarize(
        [-0.05, -0.04, -0.06])  # Pass@1 below GRPO's on every seed
    text = " ".join(cpu_study.claims(summary))
    assert ("Neither fix alone measurably raises Pass@256 over GRPO; only the two together clear zero "
            "(ReCo − GRPO = +0.090") in text
    assert "above zero: reco+apply-positive (`--occurrence-apply positive`, +0.100" in text
    assert "CI below zero: reco+apply-positive (-0.050" in text
    assert "With 4 variants compared to GRPO at 95% each, about 0.2" in text
    text = " ".join(cpu_study.claims(synthetic_summary([0.80, 0.90, 0.70], [0.81, 0.82, 0.80], [0.70, 0.72, 0.71],
                                                       **{"reco-token": [0.70, 0.72, 0.71]})))
    assert "Concentration is not established at this budget" in text and "ReCo loses coverage" in text
    assert "The token-level fix alone does not measurably raise Pass@256" in text


def test_committed_results_block_is_generated_from_the_committed_json():
    summary = json.loads((ROOT / "results" / "cpu_study.json").read_text())
    page = (ROOT / "docs" / "results.md").read_text()
    block = page[page.index(cpu_study.BEGIN) + len(cpu_study.BEGIN): page.index(cpu_study.END)]
    rerun = "rerun: python experiments/cpu_study.py --write-readme docs/results.md"
    assert block.strip() == cpu_study.render_readme(summary, "../results/cpu_study.png").strip(), rerun


def test_clip_sensitivity_numbers_are_those_of_their_json():
    """The typed paragraph on the gradient clip quotes results/cpu_study_grad_clip_off.json and cpu_study.json."""
    page = (ROOT / "docs" / "results.md").read_text()
    text = " ".join(page.split("### Sensitivity to the gradient clip", 1)[1].split("\n## ", 1)[0].split())
    off = json.loads((ROOT / "results" / "cpu_study_grad_clip_off.json").read_text())
    on = json.loads((ROOT / "results" / "cpu_study.json").read_text())
    ci = lambda s, signed=False: f"{s['mean']:{'+' if signed else ''}.3f} ± {s['ci95']:.3f}"
    grpo, reco = off["variants"]["grpo"]["pass_at_k"], off["variants"]["reco"]["pass_at_k"]
    diff = off["paired_differences"]["reco - grpo"]["pass_at_k"]
    expected = [f"GRPO Pass@1 {ci(grpo['1'])} and Pass@256 {ci(grpo['256'])}", f"ReCo {ci(reco['1'])} and {ci(reco['256'])}",
                f"{ci(diff['256'], True)} at Pass@256", f"{ci(diff['1'], True).replace('-', '−')} at Pass@1",
                f"{on['stability']['reco']['extremes']['grad_clip_active_frac']:.0%} of steps",
                f"{len(off['study']['seeds'])} seeds"]
    missing = [e for e in expected if e not in text]
    assert not missing, f"docs/results.md's clip paragraph does not match the JSON: {missing}"
