"""Harmony (deep-RL placement): masking, capacity, determinism, checkpoints, the reward model,
and a trained policy against random placement. Tiny configs: the whole file runs in seconds."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
import torch

from runners.cluster import harmony as h
from runners.cluster import policies
from runners.cluster.sim import ClusterConfig, ClusterSim, same_placement
from tests.unit.test_cluster_sim import CheckedSim
from workloads.traces import Job

TINY = dataclasses.replace(h.QUICK_DEFAULT, updates_per_episode=20)  # trains in seconds


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return h.train(TINY, tmp_path_factory.mktemp("harmony"))


def _untrained(seed: int = 0) -> h.HarmonyPlacement:
    torch.manual_seed(seed)
    return h.HarmonyPlacement(h.ActorCritic((16,)))


def _filler(job_id: int, workers: int, model: str = "vgg16") -> Job:
    return Job(id=job_id, arrival_s=0.0, model=model, workers=workers, duration_s=1e6)


def test_masked_choice_never_picks_an_infeasible_server():
    logits = np.array([100.0, 50.0, -3.0, 7.0])
    mask = np.array([False, False, True, True])
    assert h._choose(logits, mask) == 3  # the best feasible, not the best overall
    assert h._choose(logits, np.zeros(4, dtype=bool)) == -1
    rng = np.random.default_rng(0)
    assert {h._sample(logits, mask, rng) for _ in range(200)} <= {2, 3}


@pytest.mark.parametrize("ps_servers", [0, 2], ids=["one-pool", "ps-pool"])
def test_on_a_nearly_full_cluster_every_task_goes_where_it_fits(ps_servers):
    config = ClusterConfig(servers=4, ps_servers=ps_servers)
    fillers = [_filler(i, w) for i, w in enumerate((8, 7, 6, 8))]  # 0, 1, 2, 0 GPUs left
    new = [
        Job(id=10, arrival_s=0.0, model="resnet50", workers=3, duration_s=10.0, arch="ps", ps=2),
        Job(id=11, arrival_s=0.0, model="gpt2", workers=2, duration_s=10.0),
        Job(id=12, arrival_s=0.0, model="bert-base", workers=4, duration_s=10.0),
    ]
    for seed in range(5):
        sim = ClusterSim((*fillers, *new), config, policies.Fifo(), policies.bin_packing)
        for i, placement in enumerate(({0: [8, 0]}, {1: [7, 0]}, {2: [6, 0]}, {3: [8, 0]})):
            sim.pending.append(i)
            assert sim.try_start(i, placement)
        rule = _untrained(seed)
        rule.fallback = None
        rule.decisions = []
        for job in new[:2]:  # 3 GPUs are free: the PS job fits, then the 2-GPU job does not
            before = [list(f) for f in sim.free]
            placement = rule(sim, job)
            if job.id == 10:
                assert placement is not None and sim.fits(job, placement)
                assert placement.get(0, [0, 0])[0] == 0 and placement.get(3, [0, 0])[0] == 0
                sim.pending.append(job.id)
                assert sim.try_start(job.id, placement)
            else:
                assert placement is None  # masked: nowhere left for the second worker
                assert sim.free == before
        assert rule.decisions and all(ok for _, _, ok in rule.decisions)
        assert rule(sim, new[2]) is None  # 4 GPUs wanted, none of the servers has room


def test_a_full_simulation_keeps_capacity(checkpoint):
    for ps_servers in (0, 2):
        jobs = TINY.trace(321, 60)
        config = ClusterConfig(servers=4, ps_servers=ps_servers)
        rule = h.load(checkpoint)
        result = CheckedSim(jobs, config, policies.Fifo(), rule).run()
        assert result.metrics["jobs_finished"] == len(jobs)
        rand = CheckedSim(jobs, config, policies.Drf(), h.random_placement(1)).run()
        assert rand.metrics["jobs_finished"] == len(jobs)


def test_inference_is_deterministic(checkpoint):
    jobs = TINY.trace(99, 50)
    runs = []
    for _ in range(2):
        rule = h.load(checkpoint)
        rule.decisions = []
        result = ClusterSim(jobs, TINY.cluster(), policies.Fifo(), rule).run()
        runs.append((rule.decisions, result.jobs))
    assert runs[0] == runs[1]
    assert runs[0][0]


def test_the_checkpoint_round_trips_and_keeps_the_training_curve(checkpoint, tmp_path):
    assert checkpoint.name == "harmony-v1.pt"
    net, rm, meta = h.load_checkpoint(checkpoint)
    assert meta["code_version"] == h.CODE_VERSION and meta["seed"] == TINY.seed
    assert meta["config"]["epochs"] == TINY.epochs
    curve = meta["curve"]
    assert len(curve) == TINY.epochs
    assert all(np.isfinite(p["mean_reward"]) and p["val_avg_jct_s"] > 0 for p in curve)
    assert json.loads(checkpoint.with_suffix(".json").read_text())["curve"] == curve
    assert rm is not None
    # Saved again and loaded: the same outputs, torch and NumPy paths alike.
    torch.save(torch.load(checkpoint, weights_only=True), tmp_path / "copy.pt")
    net2, _, _ = h.load_checkpoint(tmp_path / "copy.pt")
    torch.manual_seed(5)
    x = torch.rand(3, 8, h.N_SERVER_FEATURES)
    j = torch.rand(3, h.N_JOB_FEATURES)
    mask = torch.rand(3, 8) > 0.3
    with torch.no_grad():
        a, b = net(x, j, mask), net2(x, j, mask)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    fast = h._NumpyActor(net2.actor).logits(x[0].double().numpy(), j[0].double().numpy())
    with torch.no_grad():
        slow = net.actor(torch.cat([x[0], j[0].expand(8, -1)], dim=1)).squeeze(1)
    assert np.allclose(fast, slow.numpy(), atol=1e-5)
    # A second training run in the same folder gets the next version.
    small = h.TrainConfig(epochs=1, episodes_per_epoch=1, jobs_per_episode=10, val_jobs=10,
                          reward_model=False, reward_warmup_episodes=0)  # fmt: skip
    out = h.train(small, checkpoint.parent)
    assert out.name == "harmony-v2.pt"
    assert h.load_checkpoint(out)[1] is None


def test_the_reward_model_learns_from_logged_samples():
    trainer = h._Trainer(TINY, h.ActorCritic((16,)), None)
    trainer.random_only = True  # heuristic and random placements, throughput-model rewards
    for seed in (1, 2):
        ClusterSim(TINY.trace(seed, 40), TINY.cluster(), policies.Fifo(), trainer).run()
    feats = np.stack([f for f, _ in trainer.rm_log])
    rewards = np.array([r for _, r in trainer.rm_log], dtype=np.float32)
    assert len(rewards) >= 40 and rewards.std() > 0.05
    torch.manual_seed(0)
    losses = h.fit_reward_model(h.RewardModel((32, 32)), feats, rewards, steps=200)
    assert losses[-1] < 0.2 * losses[0]
    assert losses[-1] < 0.5 * float(rewards.var())  # better than predicting the mean


def test_a_trained_policy_beats_random_placement_on_held_out_traces(checkpoint):
    for seed in (555, 556, 557):  # not among the training or validation seeds
        jobs = TINY.trace(seed, 60)
        trained = h.evaluate(h.load(checkpoint), jobs, TINY.cluster())["avg_jct_s"]
        random = h.evaluate(h.random_placement(seed), jobs, TINY.cluster())["avg_jct_s"]
        assert trained < 0.8 * random, (seed, trained, random)


def test_the_factory_loads_a_checkpoint_or_says_it_uses_the_quick_default(checkpoint, caplog):
    with pytest.raises(ValueError, match="params.checkpoint: no such file"):
        h.harmony("/no/such/harmony-v1.pt")
    quick = h.harmony()
    assert quick.placement_name == "harmony (quick default)"
    assert "harmony train" in caplog.text  # the log tells the user to train a real one
    assert isinstance(quick.place, h.HarmonyPlacement)
    policy = h.harmony(str(checkpoint), scheduler="drf")
    assert policy.placement_name == "harmony" and policy.scheduler_name == "drf"
    assert isinstance(policy.scheduler, policies.Drf)
    assert isinstance(policy.place, h.HarmonyPlacement)


def test_the_interval_reward_integrates_the_recorded_progress():
    jobs = TINY.trace(31, 30)
    sim = h._ProgressSim(jobs, TINY.cluster(), policies.Fifo(), policies.bin_packing)
    sim.run()
    # Every job's progress rate / work integrates to 1 over its life: the undiscounted
    # integral of R(t) counts the finished jobs.
    whole = sim.discounted_progress(np.array([0.0]), tau=1e12)[0]
    assert whole == pytest.approx(len(jobs), rel=1e-6)
    # By hand: R = 1 on [0, 10), 2 on [10, 20), 0 after; tau = 10.
    sim.progress_t, sim.progress_r = [0.0, 10.0, 20.0], [1.0, 2.0, 0.0]
    e1, e2 = np.exp(-1.0), np.exp(-2.0)
    got = sim.discounted_progress(np.array([0.0, 10.0, 25.0]), tau=10.0)
    assert got == pytest.approx([10 * (1 - e1) + 20 * (e1 - e2), 20 * (1 - e1), 0.0])


def test_interval_reward_training_runs_and_fills_every_return(tmp_path):
    cfg = h.TrainConfig(epochs=1, episodes_per_epoch=1, jobs_per_episode=20, val_jobs=20,
                        val_traces=1, reward="interval")  # fmt: skip
    trainer = h._Trainer(cfg, h.ActorCritic((16,)), None)
    trainer.run(cfg.trace(3, 20), cfg.cluster())
    returns = np.array([s[4] for s in trainer.samples])
    assert len(returns) and np.isfinite(returns).all() and returns.mean() == pytest.approx(1.0)
    path = h.train(dataclasses.replace(cfg, reward_model=False), tmp_path)
    assert h.load_checkpoint(path)[1] is None
    with pytest.raises(ValueError, match="reward must be"):
        h.train(dataclasses.replace(cfg, reward="speed"), tmp_path)


def test_under_the_interval_reward_the_agent_trains_on_predicted_speeds(tmp_path):
    cfg = h.TrainConfig(epochs=1, episodes_per_epoch=1, jobs_per_episode=20, val_jobs=20,
                        val_traces=1, imitate="", reward_warmup_episodes=1,
                        audit_fraction=0.3)  # fmt: skip
    rm = h.RewardModel((8,))
    trainer = h._Trainer(cfg, h.ActorCritic((16,)), rm)
    with torch.no_grad():  # a model that predicts 0.25 for every placement
        for p in rm.parameters():
            p.zero_()
        rm.net[-1].bias.fill_(0.25)
    jobs = cfg.trace(3, 20)
    trainer.run(jobs, cfg.cluster())
    placed = trainer.predicted
    assert len(placed) == len(jobs)
    audited = len(trainer.rm_log)  # true speeds, logged to refit the model
    assert 0 < audited < len(jobs)
    # Audited or not, the agent gets the prediction (the audit only feeds the model).
    assert all(v == pytest.approx(0.25) for v in placed.values())
    # The progress the returns integrate is the predicted one: with every job at 0.25 of its
    # isolated speed, R integrates to a quarter of the jobs (the true speeds give all of them).
    trainer.predicted = {}
    sim = h._ProgressSim(jobs, cfg.cluster(), policies.Fifo(), policies.bin_packing,
                         predicted={j.id: 0.25 for j in jobs})  # fmt: skip
    sim.run()
    whole = sim.discounted_progress(np.array([0.0]), tau=1e12)[0]
    true = sum((s.finish - s.first_start) * 0.25 / s.job.duration_s for s in sim.finished)
    assert whole == pytest.approx(true, rel=1e-6) and whole < 0.5 * len(jobs)
    path = h.train(cfg, tmp_path)
    assert h.load_checkpoint(path)[1] is not None  # the checkpoint keeps the reward model
    meta = h.load_checkpoint(path)[2]
    assert set(meta["val_baselines_avg_jct_s"]) == {*h.HEURISTICS, "random"}


def test_imitation_warm_start_learns_the_heuristic_and_the_best_epoch_is_kept(tmp_path):
    cfg = h.TrainConfig(epochs=2, episodes_per_epoch=1, jobs_per_episode=30, val_jobs=30,
                        reward_model=False, imitate="bin-packing", imitation_episodes=3,
                        imitation_steps=300)  # fmt: skip
    path = h.train(cfg, tmp_path)
    _, _, meta = h.load_checkpoint(path)
    curve = meta["curve"]
    assert curve[0]["epoch"] == -1  # the warm start is validated too
    best = min(p["val_avg_jct_s"] for p in curve)
    assert meta["best_val_avg_jct_s"] == best
    # The kept weights reproduce the best validation score (inference is deterministic).
    rule = h.load(path)
    val = [cfg.trace(cfg.val_seed + k, cfg.val_jobs) for k in range(cfg.val_traces)]
    again = np.mean([h.evaluate(rule, t, cfg.cluster())["avg_jct_s"] for t in val])
    assert again == pytest.approx(best)
    # Warm start alone: on a held-out trace, at every decision bin packing takes, the actor
    # mostly makes the same one; an untrained actor does not.
    only = h.train(dataclasses.replace(cfg, epochs=0), tmp_path / "bc")

    def agreement(rule: h.HarmonyPlacement) -> float:
        same = []

        def shadow(sim, job):
            want, got = policies.bin_packing(sim, job), rule(sim, job)
            if want is not None:
                same.append(got is not None and same_placement(got, want))
            return want

        ClusterSim(cfg.trace(777, 60), cfg.cluster(), policies.Fifo(), shadow).run()
        return sum(same) / len(same)

    trained, untrained = agreement(h.load(only)), agreement(_untrained())
    assert trained >= 0.7 and trained > untrained + 0.2, (trained, untrained)
    with pytest.raises(ValueError, match="imitate: unknown heuristic"):
        h.train(dataclasses.replace(cfg, imitate="magic"), tmp_path)


def test_evaluate_sweeps_loads_and_rejects_bad_ones(checkpoint, capsys):
    rows = h.evaluate_sweep(h.load(checkpoint), TINY, [0.5, 1.0], jobs=20, seed=5, traces=1)
    assert {(r["load"], r["rule"]) for r in rows} == {
        (load, rule) for load in (0.5, 1.0) for rule in ("harmony", "random", *h.HEURISTICS)
    }
    assert all(r["avg_jct_s"] > 0 for r in rows)
    with pytest.raises(SystemExit) as exit_:
        h.main(["evaluate", "--checkpoint", str(checkpoint), "--loads", "fast"])
    assert exit_.value.code == 2 and "--loads" in capsys.readouterr().err
