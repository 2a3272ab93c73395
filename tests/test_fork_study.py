"""experiments/fork_study.py and its arms and detectors: the arms' loss math against closed forms worked out token by
token, the selectors and detector metrics against brute-force counts, Fisher's exact test against scipy, the stall
rule, and a tiny plan end to end that resumes from its archive and reuses another archive's grpo runs."""
import importlib.util
import itertools
import json
import math
import random
import shutil
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "experiments")]
import fork_detect as fd  # noqa: E402  (registers nothing)
import lab  # noqa: E402  (files SimKO's token ratio in reco_mini for good: before the fixture's snapshot)

import reco_mini as rm  # noqa: E402

fs = fa = None  # fork_study and fork_arms register the arms in reco_mini: loaded per module run, then unregistered


@pytest.fixture(autouse=True, scope="module")
def _arms_registered_only_here():
    """Other test modules parametrize over reco_mini's registries at collection and iterate them at run time: the arms
    exist only while this module's tests run."""
    global fs, fa
    registries = (rm.METHODS, rm.TOKEN_RATIOS, rm.OCCURRENCES)
    before = [set(r) for r in registries]
    spec = importlib.util.spec_from_file_location("fork_study", ROOT / "experiments" / "fork_study.py")
    fs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fs)
    fa = fs.fork_arms
    yield
    for registry, names in zip(registries, before):
        for name in set(registry) - names:
            del registry[name]
    for name in ("fork_arms", "fork_study"):
        sys.modules.pop(name, None)


def _terms(B=3, T=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    logp = (-torch.rand(B, T, generator=g, dtype=torch.float64) * 2).requires_grad_(True)
    old = logp.detach() + (torch.rand(B, T, generator=g, dtype=torch.float64) - 0.5) * 0.8  # some ratios leave the clip
    A = torch.tensor([[1.0], [-0.7], [0.4]], dtype=torch.float64)
    r = torch.exp(logp - old)
    keep = (~(((r > 1.2) & (A > 0)) | ((r < 0.8) & (A < 0)))).double()
    v = torch.rand(B, T, generator=g, dtype=torch.float64)
    select = (torch.rand(B, T, generator=g) < 0.5).double()
    return rm.TokenTerms(logp, r, A, keep, v, v, torch.tensor(0.3, dtype=torch.float64), batch={"select": select}), old


def _by_hand(t, old, cfg, on_selected, off_selected):
    """Each token's loss value and d loss / d logp, written out per token from the equations in docs/fork_study.md."""
    values, grads = torch.zeros_like(t.r), torch.zeros_like(t.r)
    for b, s in itertools.product(range(t.r.shape[0]), range(t.r.shape[1])):
        a, r = float(t.A[b, 0]), math.exp(float(t.logp.detach()[b, s] - old[b, s]))
        rho = min(float(t.v[b, s]) / 0.3, cfg.variance_cap)
        inside = not ((r > 1 + cfg.clip_high and a > 0) or (r < 1 - cfg.clip_low and a < 0))
        grpo_value = -min(r * a, min(max(r, 1 - cfg.clip_low), 1 + cfg.clip_high) * a)
        grpo_grad = -r * a if inside else 0.0
        kind = on_selected if t.batch["select"][b, s] > 0 else off_selected
        values[b, s], grads[b, s] = {"variance": (-rho * a * inside, -rho * a * inside), "grpo": (grpo_value, grpo_grad),
                                     "zero": (0.0, 0.0)}[kind]
    return values, grads


@pytest.mark.parametrize("ratio, on, off", [("variance-fork-oracle", "variance", "grpo"),
                                            ("variance-fork-detected", "variance", "grpo"),
                                            ("entropy-top20", "grpo", "zero")])
def test_arm_losses_and_gradients_token_by_token(ratio, on, off):
    t, old = _terms()
    cfg = rm.LossConfig(token_ratio=ratio, occurrence="none")
    loss, _ = rm.TOKEN_RATIOS[ratio](t, cfg)
    (grad,) = torch.autograd.grad(loss.sum(), t.logp)
    values, grads = _by_hand(t, old, cfg, on, off)
    torch.testing.assert_close(loss.detach(), values)
    torch.testing.assert_close(grad, grads)


def test_policy_loss_reads_the_select_mask_from_the_batch():
    """The contract: policy_loss hands its batch to the token term (TokenTerms.batch), where an arm reads "select";
    an all-ones fork mask is reco-token's loss, an all-zeros one GRPO's."""
    t, old = _terms()
    mask = torch.ones_like(t.r)
    batch = {"old_logp": old, "mask": mask, "advantages": t.A[:, 0], "v_old": t.v, "v_old_mean": t.v_old_mean}
    cfg, var, grpo = (rm.LossConfig(token_ratio=n, occurrence="none") for n in ("variance-fork-oracle", "variance", "is"))
    for select, same in ((torch.ones_like(mask), var), (torch.zeros_like(mask), grpo)):
        got = rm.policy_loss(t.logp, batch | {"select": select}, cfg, v=t.v)[0]
        torch.testing.assert_close(got, rm.policy_loss(t.logp, batch, same, v=t.v)[0])


def test_a_selecting_ratio_without_its_mask_says_so():
    t, _ = _terms()
    t.batch = {}
    with pytest.raises(ValueError, match="needs the batch's 'select' mask"):
        rm.TOKEN_RATIOS["entropy-top20"](t, rm.LossConfig(token_ratio="entropy-top20", occurrence="none"))


def test_top_share_against_brute_force():
    rng = random.Random(0)
    for _ in range(50):
        B, T = rng.randint(1, 4), rng.randint(1, 7)
        score = torch.tensor([[rng.choice([0.1, 0.5, 0.9, rng.random()]) for _ in range(T)] for _ in range(B)])
        mask = torch.tensor([[float(rng.random() < 0.7) for _ in range(T)] for _ in range(B)])
        share = rng.choice([0.0, 0.2, 0.5, 1.0, rng.random()])
        live = [(b, t) for b in range(B) for t in range(T) if mask[b, t] > 0]
        k = min(len(live), math.ceil(share * len(live)))
        want = torch.zeros(B, T)
        if k:
            threshold = sorted((float(score[b, t]) for b, t in live), reverse=True)[k - 1]
            for b, t in live:
                want[b, t] = float(float(score[b, t]) >= threshold)
        assert torch.equal(fd.top_share(score, mask, share), want)


def test_precision_recall_against_a_brute_force_count():
    rng = random.Random(1)
    for _ in range(50):
        flagged = [[rng.random() < 0.3 for _ in range(6)] for _ in range(4)]
        truth = [[rng.random() < 0.3 for _ in range(6)] for _ in range(4)]
        cells = list(zip(sum(flagged, []), sum(truth, [])))
        tp, n_flag, n_true = sum(f and t for f, t in cells), sum(f for f, _ in cells), sum(t for _, t in cells)
        got = fd.precision_recall(torch.tensor(flagged).double(), torch.tensor(truth).double())
        assert got["hits"] == tp and got["flagged"] == n_flag and got["forks"] == n_true
        assert got["precision"] == (tp / n_flag if n_flag else None) and got["recall"] == (tp / n_true if n_true else None)
        if n_flag and n_true:
            p, r = tp / n_flag, tp / n_true
            assert got["f1"] == pytest.approx(2 * p * r / (p + r) if tp else 0.0)


class _Task:
    """A stand-in task with given labels: the detectors must never read labels, and the table must score against
    exactly these (the real countdown-long labels are covered by the end-to-end test's hook)."""

    def __init__(self, labels):
        self.labels = labels

    def token_labels(self, problems, group_size, texts, resp, mask, tokenizer):
        return self.labels

    def canonical_keys(self, problems, group_size, texts):  # what the studies' diagnostics (diagnostics.on_step) ask
        return [f"text:{t}" for t in texts]


def _step(seed=0, P=2, G=4, T=6):
    g = torch.Generator().manual_seed(seed)
    resp = torch.randint(0, 4, (P * G, T), generator=g)
    mask = torch.ones(P * G, T)
    mask[0, 4:] = 0
    rewards = torch.tensor([[1.0, 0.0, 1.0, 0.0], [0.0, 0.0, 0.0, 1.0]])
    kinds = ["fork", "style", "determined"]
    labels = [[kinds[int(x)] for x in torch.randint(0, 3, (int(mask[i].sum()),), generator=g)] for i in range(P * G)]
    labels[5] = ["other"] * T  # a response outside the grammar
    return lab.Step(problems=[None] * P, group_size=G, texts=[""] * (P * G), resp=resp, mask=mask, responses=[[]] * (P * G),
                    rewards=rewards, advantages=rm.group_advantages(rewards).flatten(),
                    old_logp=-torch.rand(P * G, T, generator=g), v_old=torch.rand(P * G, T, generator=g),
                    v_old_mean=torch.tensor(0.5), entropy=torch.rand(P * G, T, generator=g), weights=torch.ones(P * G),
                    loss_cfg=lab.LossConfig(), task=_Task(labels), tokenizer=None)


def test_group_contrast_and_clip_cov_against_brute_force():
    step = _step()
    B, T = step.resp.shape
    G = step.group_size
    want = torch.zeros(B, T, dtype=torch.float64)
    for i, t in itertools.product(range(B), range(T)):
        if not step.mask[i, t]:
            continue
        group = range(i // G * G, i // G * G + G)
        good = [int(step.resp[j, t]) for j in group if step.mask[j, t] and step.rewards.flatten()[j] > 0]
        bad = [int(step.resp[j, t]) for j in group if step.mask[j, t] and step.rewards.flatten()[j] <= 0]
        if good and bad:
            p = {v: good.count(v) / len(good) for v in set(good + bad)}
            q = {v: bad.count(v) / len(bad) for v in set(good + bad)}
            m = {v: (p[v] + q[v]) / 2 for v in p}
            want[i, t] = sum(0.5 * x[v] * math.log2(x[v] / m[v]) for x in (p, q) for v in p if x[v] > 0)
    torch.testing.assert_close(fd.group_contrast(step).double(), want, atol=1e-6, rtol=1e-6)
    live = [(i, t) for i in range(B) for t in range(T) if step.mask[i, t]]
    mean_lp = sum(float(step.old_logp[i, t]) for i, t in live) / len(live)
    mean_a = sum(float(step.advantages[i]) for i, _ in live) / len(live)
    cov = fd.clip_cov(step)
    for i, t in live:
        assert float(cov[i, t]) == pytest.approx((float(step.old_logp[i, t]) - mean_lp) * (float(step.advantages[i]) - mean_a),
                                                 abs=1e-6)


def test_detector_table_and_rule_on_labelled_batches():
    step = _step()
    table = fd.detector_table({"a": step, "b": _step(seed=1)})
    labels = step.task.labels
    in_grammar = [i for i, row in enumerate(labels) if row[0] != "other"]
    forks = sum(x == "fork" for i in in_grammar for x in labels[i])
    assert table["a"]["tokens"] == sum(len(labels[i]) for i in in_grammar) and table["a"]["responses"] == len(in_grammar)
    assert table["a"]["fork_share"] == pytest.approx(forks / table["a"]["tokens"])
    for row in table["a"]["detectors"].values():
        assert row["forks"] == forks and row["flagged"] >= forks  # the matched count (ties add, never remove)
    choice = fd.choose_detector(table)
    best = max(choice["mean_f1"].values())
    assert choice["f1"] == best and choice["qualifies"] == (best >= 0.5)
    assert choice["chosen"] == next(d for d in fd.DETECTORS if choice["mean_f1"][d] == best)  # ties: the earlier


def test_on_step_shares_follow_each_arm():
    """The hook's update share uses the arm's own scale: entropy-top20 puts nothing on unselected tokens, the oracle
    the variance ratio on forks only; and it scores the selection against the labels."""
    step = _step()
    for ratio in ("entropy-top20", "variance-fork-oracle", "is"):
        step.loss_cfg = rm.LossConfig(token_ratio=ratio, occurrence="none")
        out = fa.on_step(step)
        cls = fd.token_classes(step)
        scale = {"is": torch.ones_like(step.v_old), "entropy-top20": fa.entropy_top(step),
                 "variance-fork-oracle": torch.where(cls == 0, torch.clamp(step.v_old / step.v_old_mean, max=10.0), 1.0)}[ratio]
        size = (scale * step.advantages.view(-1, 1)).abs() * step.mask
        for k, c in enumerate(fs.TOKEN_CLASSES):
            assert out[f"arm_share_{c}"] == pytest.approx(float(size[(cls == k) & (step.mask > 0)].sum() / size.sum()))
        if ratio == "variance-fork-oracle":
            assert out["select_precision"] == 1.0 and out["select_recall"] == 1.0
        if ratio == "is":
            assert out["select_share"] is None


def test_fisher_exact_against_scipy():
    scipy_stats = pytest.importorskip("scipy.stats")
    for a, b, c, d in itertools.product(range(0, 9, 2), range(0, 9, 3), range(0, 9, 2), range(0, 9, 3)):
        if (a + b) and (c + d) and (a + c) and (b + d):
            assert fs.fisher_exact(a, b, c, d) == pytest.approx(scipy_stats.fisher_exact([[a, b], [c, d]])[1], rel=1e-9)


def test_stall_rule():
    def traj(*p1):
        return [{"step": 20 * (i + 1), "pass_at_k": {"1": p}} for i, p in enumerate(p1)]
    assert fs.stalled(traj(0.30, 0.06, 0.07), 0.05)  # early progress does not count: steps >= 40 stay <= 0.07
    assert not fs.stalled(traj(0.05, 0.05, 0.0701), 0.05)  # one late checkpoint above base + 0.02
    assert not fs.stalled(traj(0.01), 0.05)  # no checkpoint at step >= 40: not a stall (a stopped run is diverged)
    assert not fs.stalled(traj(0.30, 0.06, 0.07), 0.05, stopped="non-finite loss")  # stopped: diverged, never stalled
    assert f"same n) + {fs.STALL_MARGIN}); choose" in fs.SELECTION_RULE  # the written rule keeps the margin's digits


def test_selection_counts_a_stalled_seed_as_diverged():
    def res(lr, seed, p1):
        return {"spec": {"arm": "grpo", "lr": lr, "seed": seed}, "divergence": {"diverged": False},
                "trajectory": [{"step": 40, "pass_at_k": {"1": 0.06, "64": 0.5}},
                               {"step": 120, "pass_at_k": {"1": p1, "64": 0.5}}]}
    plan = {"lrs": (1e-4, 2e-4), "select": (20, 21), "steps": 120, "k": "64", "stall_after": 40}
    results = [res(1e-4, s, 0.1) for s in (20, 21)] + [res(2e-4, 20, 0.3), res(2e-4, 21, 0.06)]
    assert fs.selection(results, plan, 0.05, ["grpo"])["choices"] == {"grpo": 1e-4}  # 2e-4's seed 21 stalled
    assert fs.selection(results, plan, None, ["grpo"])["choices"] == {"grpo": 2e-4}  # no base yet: no stall known


def test_weighted_gap_reports_pairs_without_overlap():
    arm = {1: [(0.1, 0.5), (0.3, 0.7)], 2: [(0.5, 0.9), (0.6, 0.9)]}
    ref = {1: [(0.1, 0.4), (0.2, 0.5)], 2: [(0.1, 0.4), (0.2, 0.5)]}
    out = fs.weighted_gap(arm, ref)
    assert out["no_overlap"] == [2] and out["widths"] == {1: pytest.approx(0.1)}
    assert out["mean"] == pytest.approx(fs.compare(arm, ref)["primary"]["per_seed"]["1"])


def test_frontier_band_is_the_t_interval_clipped_to_a_probability():
    from protocol import first_reach
    from scipy import stats
    curves = [[(0.1, 0.05), (0.3, 0.95)], [(0.1, 0.95), (0.2, 0.05)], [(0.25, 0.5), (0.4, 0.6)]]
    xs, mean, lo, hi = fs.frontier_band(curves, grid=20)
    assert xs == pytest.approx([0.1, 0.15, 0.2, 0.25, 0.3])  # where at least two seeds reach that Pass@1
    for x, m, low, high in zip(xs, mean, lo, hi):
        ys = [y for c in curves if (y := first_reach(c, x)) is not None]
        half = stats.t.ppf(0.975, len(ys) - 1) * stats.tstd(ys) / math.sqrt(len(ys))
        assert m == pytest.approx(sum(ys) / len(ys))
        assert (low, high) == pytest.approx((max(0.0, m - half), min(1.0, m + half)))
    assert lo[0] == 0.0 and hi[0] == 1.0  # two seeds 0.9 apart: the raw t interval leaves [0, 1] on both sides


def test_budget_drops_arms_in_the_stated_order():
    plan = fs.make_plan(fs.argparse.Namespace(out="x", quick=False, timing=True, reuse=""), None) | {"reuse": None}
    timing = {"arms": {a: {"s_per_step": 4.0} for a in fs.ARMS}, "s_per_eval_n128": 60.0}
    per_run = 120 * 4.0 + 6 * 60.0  # 840 s; 14 runs per arm
    fixed = 60 * 4.0 + 2 * 60.0 * 8 / 128 + 2 * 60.0
    assert fs.projected_hours(timing, list(fs.ARMS), plan) == pytest.approx((fixed + 7 * 14 * per_run) / 3600)
    out = fs.budget(timing, plan)  # 7 arms: 23 h; 4 arms: 13 h
    assert out["arms"] == [a for a in fs.ARMS if a not in fs.DROP_ORDER] and out["within_budget"]
    assert fs.budget({**timing, "arms": {a: {"s_per_step": 1.0} for a in fs.ARMS}}, plan)["arms"] == list(fs.ARMS)
    assert fs.budget({**timing, "arms": {a: {"s_per_step": 40.0} for a in fs.ARMS}}, plan)["within_budget"] is False


@pytest.mark.slow
def test_quick_study_end_to_end_resumes_and_reuses(tmp_path):
    out, results = tmp_path / "runs", tmp_path / "q.json"
    args = ["--quick", "--out", str(out), "--results", str(results)]
    summary = fs.main(args)
    n_runs = summary["compute"]["runs_planned"]
    assert not summary["partial"] and summary["compute"]["runs"] == n_runs
    extra = summary["compute"]["correction_runs"]  # the lr-matched runs at the lr not chosen, and the base again
    assert extra == 1 + 3 * len(fs.QUICK["confirm"]) and summary["compute"]["runs_this_invocation"] == n_runs + extra
    matched = summary["correction"]["lr_matched"]
    assert not matched["partial"] and set(matched["contrasts"]) == {
        f"{fs.key(a, lr)} - {fs.key(r, lr)}" for lr in fs.QUICK["matched_lrs"] for a, r in fs.MATCHED_CONTRASTS}
    rerun = summary["correction"]["deviations"][0]
    assert rerun["could_change_a_verdict"] is False  # the same base evaluated twice gives the same counts
    assert set(summary["detector"]["table"]) == {"base", "grpo step 2"}
    assert summary["design"]["arms_run"] == [a for a in fs.QUICK["arms"] if summary["detector"]["qualifies"] or a != fs.DETECTED]
    for v in summary["arms"].values():
        assert v["seeds"] == list(fs.QUICK["confirm"]) and len(v["stalled"]) == 2
    run = json.loads(next((out).glob("base-*/confirm/entropy-top20/*/seed402/result.json")).read_text())
    assert set(fs.DIAGNOSTICS) <= set(run["diagnostics"]) and run["diagnostics"]["select_share"][0] > 0  # the hook ran
    assert {h["name"] for h in summary["hypotheses"] if h["tested"]} >= {"H1", "H2"}
    assert "fork-study:begin" not in json.dumps(summary)
    # resume: a deleted run comes back from the archive; without the archive it is redone, nothing else
    lost = next(out.glob("base-*/confirm/grpo/*/seed403/result.json"))
    lost.unlink()
    assert fs.main(args)["compute"]["runs_this_invocation"] == 0 and lost.exists()
    lost.unlink()
    (tmp_path / "q_runs.jsonl.gz").unlink()
    assert fs.main(args)["compute"]["runs_this_invocation"] == 1
    # a fresh checkout: the archive restores every run
    shutil.rmtree(out)
    assert fs.main(args)["compute"]["runs_this_invocation"] == 0
    # another study of the same design reuses this archive's grpo confirmation runs and the base's test evaluation
    other = fs.main(["--quick", "--out", str(tmp_path / "other"), "--results", str(tmp_path / "o.json"), "--reuse",
                     str(tmp_path / "q_runs.jsonl.gz")])
    reused = 1 + len(fs.QUICK["confirm"])
    assert other["compute"]["reused_from_long_study"] == reused
    # and runs the correction's own: the base again, reco-token and the oracle at the lr not chosen (grpo's are reused)
    assert other["compute"]["runs_this_invocation"] == n_runs - reused + 1 + 2 * len(fs.QUICK["confirm"])
    status = fs.main(args + ["--status"])
    assert all(status[p]["done"] == status[p]["planned"] for p in ("detect", "base", "select"))
    block = fs.render_block(summary, "q.json", "q.png")
    assert "Hypotheses" in block and "Fork detectors" in block
    import headline
    lines = headline.fork_study_lines(summary)
    assert [line.split(":")[0].strip(" -") for line in lines[1:5]] == ["H1", "H2", "H3", "H4"]
    assert "partial" in headline.fork_study_lines(summary | {"partial": True})[0] and headline.fork_study_lines(None) == []


def test_the_compute_line_says_when_the_runs_went_over_the_budget():
    c = {"runs": 59, "runs_planned": 59, "reused_from_long_study": 1, "budget_hours": 16.0, "projected_run_hours": 15.1}
    over = fs.compute_line(c | {"run_time_s": 17.5 * 3600})
    assert "17.50 h summed" in over and "over it by 1.50 h" in over and "projected 15.10 h" in over
    assert "within it" in fs.compute_line(c | {"run_time_s": 3600.0})
    assert fs.compute_line(c | {"run_time_s": 3600.0, "projected_run_hours": None}).endswith("wall times.")


def test_the_committed_block_is_the_render_of_the_committed_summary():
    """docs/results.md's fork-study block is generated from results/fork_study.json, never typed."""
    summary_path = ROOT / "results" / "fork_study.json"
    text = (ROOT / "docs" / "results.md").read_text()
    block = text.split(fs.BEGIN, 1)[1].split(fs.END, 1)[0].strip()
    if not summary_path.exists():
        assert block == "_Not run yet._"
        return
    summary = json.loads(summary_path.read_text())
    assert block == fs.render_block(summary, "results/fork_study.json", "../results/fork_study.png").strip()
    partial = summary["partial"] or summary.get("correction", {}).get("lr_matched", {}).get("partial", False)
    assert ("PARTIAL" in block) == partial  # the study, or the correction's exploratory runs


@pytest.mark.slow
@pytest.mark.skipif(not (ROOT / "results" / "long_study_base.pt").exists(), reason="the committed base is not here")
def test_detect_phase_rollouts_of_the_committed_base(tmp_path):
    """The detect phase's pieces on the real base and task: a rollout batch of countdown-long responses, its fork
    tokens exactly the parser's labels (countdown.long_labels, counted by hand here), and the table over them."""
    from reco.tasks import countdown

    plan = fs.make_plan(fs.argparse.Namespace(out=str(tmp_path), quick=False, timing=True, reuse=""), None)
    ctx = fs.ls.load_context(plan["flags"], ROOT / "results" / "long_study_base.pt")
    assert fs.ls.base_sha256(ctx["base"]) == fs.BASE_SHA256
    cfg = lab.parse_config([*fs.ls.TASK_FLAGS, "--seed", "19"])
    with torch.no_grad():
        step = fs.rollout_step(cfg, ctx["base"], ctx["tokenizer"], ctx["splits"]["val"][:6], 5)
    forks, in_grammar = 0, 0
    for row, n in zip(step.resp.tolist(), step.mask.sum(-1).tolist()):
        chars = ctx["tokenizer"].convert_ids_to_tokens(row[: int(n)])
        labels = countdown.long_labels("".join(chars[:-1] if chars[-1:] == [ctx["tokenizer"].eos_token] else chars))
        if labels is not None:
            forks, in_grammar = forks + labels.count("fork"), in_grammar + 1
    assert in_grammar > 0 and float(fd.fork_tokens(step).sum()) == forks
    table = fd.detector_table({"base": step})["base"]
    assert table["responses"] == in_grammar and table["responses_all"] == 6 * cfg.group_size
    assert all(row["forks"] == forks for row in table["detectors"].values())
    # one RL step of the oracle arm on the real base: the hook sees the labels, and its selection is exactly the forks
    model = fs.copy.deepcopy(ctx["base"]).requires_grad_(True)
    cfg = lab.parse_config([*fs.ls.TASK_FLAGS, "--method", "reco-token-fork-oracle", "--steps", "1", "--prompts-per-step",
                            "4", "--out", str(tmp_path)])
    lab.train_rl(cfg, "reco-token-fork-oracle", model, ctx["base"], ctx["tokenizer"], ctx["splits"]["train"], tmp_path,
                 on_step=fa.on_step)
    (row,) = fs.ls.read_jsonl(tmp_path / "log.jsonl")
    assert row["select_share"] > 0 and row["select_precision"] == row["select_recall"] == 1.0
    assert sum(row[f"arm_share_{c}"] for c in fs.TOKEN_CLASSES) == pytest.approx(1.0)
