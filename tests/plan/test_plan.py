"""`bdsgd plan`: the jobs a config makes are the DAG's (held to a Snakemake dry run), a run's
estimate is the formula's, and the command prints and writes the bill."""

from __future__ import annotations

import json
import math
from collections import Counter

import pytest
import yaml

from bdsgd.config import from_dict, load_config
from bdsgd.plan import ALONE, LOCAL, SECONDS_PER_SAMPLE, TEST_SAMPLES, bill, jobs
from tests.helpers import REPO, bdsgd_in_process, job_stats, run_cli, snakemake


@pytest.mark.slow  # runs snakemake
@pytest.mark.parametrize("config", ["configs/smoke.yaml", "configs/paper.yaml"])
def test_the_plans_jobs_are_the_dags(config, tmp_path):
    """Each shipped config's DAG builds (a dry run of every job), and its jobs are the plan's."""
    proc = snakemake("-n", "-F", "--configfile", config, "--cores", "1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    dag = {rule: n for rule, n in job_stats(proc.stdout).items() if rule not in LOCAL}
    planned = Counter()
    for job in jobs(load_config(REPO / config), SECONDS_PER_SAMPLE["cuda"], "cuda"):
        planned[job.rule] += job.count
    assert dict(planned) == dag


def cfg_of(iterations: int, policies=("sync", "bdsgd"), **sections):
    return from_dict({"experiment": "x", "traces": {"t": {"source": "simulate",
                                                          "simulate": {"workers": 8}}},
                      "resources": {"train_gpus": 1, "train_runtime_min": 4},
                      "train": {"trace": "t", "tasks": ["mnist"], "policies": list(policies),
                                "seeds": [0, 1, 2], "batch_size": 32,
                                "max_iterations": iterations, "eval_every": 100}, **sections})


def test_a_runs_estimate_is_the_formula():
    plan = bill(cfg_of(1000), {"mnist": 1e-4}, "cuda")
    # every 100th iteration and each of the last 10 % (near the target): 110 evaluations
    seconds = 1000 * 8 * 32 * 1e-4 + 110 * TEST_SAMPLES["mnist"] * 1e-4 / 3  # 62.3 s
    runs = [j for j in plan["jobs"] if j["rule"] == "train"]
    assert [(j["name"], j["count"], j["gpus"]) for j in runs] == [("t/mnist/sync", 3, 1),
                                                                  ("t/mnist/bdsgd", 3, 1)]
    assert runs[0]["hours"] == pytest.approx(seconds / 3600)
    assert plan["gpu_hours"] == pytest.approx(6 * seconds / 3600 + sum(
        j["count"] * j["gpus"] * j["charged_hours"] for j in plan["jobs"] if j["rule"] != "train"))
    assert plan["runs_over_their_limit"] == [] and math.isclose(
        plan["seconds_per_sample"]["mnist"], 1e-4)
    longer = bill(cfg_of(10_000), {"mnist": 1e-4}, "cuda")  # 623 s against a 4-minute limit
    assert longer["runs_over_their_limit"] == ["t/mnist", "t/mnist/sync", "t/mnist/bdsgd"]


def test_modes_are_billed_per_gradient_and_the_pilot_per_rate_and_the_bill_says_so():
    """async computes each worker's batch alone (ALONE x s where not measured, the measured s
    where given); the pilot is its sync run per learning rate; the assumptions are listed."""
    cfg = cfg_of(1000, ("sync", "async"), pilot={"lr_factors": [0.5, 1.0, 2.0]})
    evaluations = 110 * TEST_SAMPLES["mnist"] * 1e-4 / 3
    hours = {j["name"]: j["hours"] for j in bill(cfg, {"mnist": 1e-4}, "cuda")["jobs"]
             if j["rule"] in ("train", "pilot")}
    samples = 1000 * 8 * 32
    assert hours["t/mnist/async"] == pytest.approx((samples * 1e-4 * ALONE["cuda"] + evaluations) / 3600)
    assert hours["t/mnist"] == pytest.approx(3 * hours["t/mnist/sync"])  # the pilot's 3 rates
    measured = bill(cfg, {"mnist": 1e-4}, "cuda", alone={"mnist": 5e-4})
    async_run = next(j for j in measured["jobs"] if j["name"] == "t/mnist/async")
    assert async_run["hours"] == pytest.approx((samples * 5e-4 + evaluations) / 3600)
    text = " ".join(bill(cfg, None, "cuda")["assumptions"])
    assert "assumed (bdsgd.plan.SECONDS_PER_SAMPLE['cuda'])" in text and "15 x s assumed" in text
    assert "measured here on cuda" in " ".join(measured["assumptions"])


def test_plan_prints_and_writes_the_bill(tmp_path):
    out = tmp_path / "plan.json"
    proc = run_cli("plan", "--config", "configs/smoke.yaml", "--measure", "--json", out)
    total = sum(j.count for j in jobs(load_config(REPO / "configs/smoke.yaml"),
                                      SECONDS_PER_SAMPLE["cpu"], "cpu"))  # the dry run's (above)
    assert f"{total} jobs on cpu" in proc.stdout and "GPU-hours" in proc.stdout
    plan = json.loads(out.read_text())
    assert plan["total_jobs"] == total and plan["seconds_per_sample_from"] == "measured here"
    assert 0 < plan["seconds_per_sample"]["digits"] < 1e-2


def test_measuring_on_a_gpu_that_is_not_there_is_one_line(capsys, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("the error is for machines without CUDA")
    proc = bdsgd_in_process(capsys, "plan", "--config", REPO / "configs/smoke.yaml", "--measure",
                            "--device", "cuda")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and "--device" in proc.stderr


def test_the_paper_config_is_billed_per_gpu():
    config = yaml.safe_load((REPO / "configs/paper.yaml").read_text())
    plan = bill(from_dict(config), None, "cuda")
    assert plan["gpu_hours"] > 0 and plan["total_jobs"] > 100


def regime_cfg(bandwidth_gbit_s: float, gradient_s: float):
    """A 16-worker straggler cluster and a calm one training MNIST's LeNet on one server."""
    sim = {"workers": 16, "iterations": 400}
    return from_dict({
        "experiment": "x", "traces": {
            "straggler": {"source": "simulate", "simulate": {**sim, "scenario": "mixed"}},
            "calm": {"source": "simulate", "simulate": {**sim, "scenario": "calm"}}},
        "network": {"topology": "ps", "bandwidth_gbit_s": bandwidth_gbit_s},
        "train": {"trace": ["straggler", "calm"], "tasks": ["mnist"], "clock": "scaled",
                  "gradient_s": gradient_s}})


def test_the_plan_states_each_cells_regime_and_strict_refuses_a_tie(tmp_path, capsys):
    """Compute-dominated (a 50 ms gradient, 100 Gbit/s): the straggler cell is informative, the
    calm one a control. Communication-dominated (a 0.1 ms gradient on 1 Gbit/s): the link hides
    the straggler and the optimum ties with sync; --strict refuses that config in one line."""
    from bdsgd.errors import UserError
    from bdsgd.plan.regime import cells, require_separating

    fast = {c.trace: c for c in cells(regime_cfg(100.0, 0.05), {"mnist": 1e-4})}
    assert fast["straggler"].verdict == "informative" and fast["straggler"].over_sync > 1.5
    assert fast["calm"].verdict == "control" and fast["straggler"].comm_to_compute < 0.1
    slow = cells(regime_cfg(1.0, 1e-4), {"mnist": 1e-4})
    [tie] = [c for c in slow if c.trace == "straggler"]
    assert tie.verdict == "cannot separate" and tie.comm_to_compute > 10
    with pytest.raises(UserError, match=r"x.yaml: network: cannot separate .* straggler x mnist"):
        require_separating("x.yaml", [{**vars(c), "verdict": c.verdict} for c in slow])
    config, data = tmp_path / "slow.yaml", tmp_path / "data"
    (data / "MNIST/raw").mkdir(parents=True)  # --strict checks the data folders too
    config.write_text(yaml.safe_dump({
        "experiment": "x", "traces": {"t": {"source": "simulate", "simulate": {
            "workers": 16, "iterations": 400, "scenario": "mixed"}}},
        "network": {"topology": "ps", "bandwidth_gbit_s": 1.0},
        "train": {"trace": "t", "tasks": ["mnist"], "clock": "scaled", "gradient_s": 1e-4,
                  "data_dir": str(data)}}))
    proc = bdsgd_in_process(capsys, "plan", "--config", config, "--strict")
    assert proc.returncode == 2 and "t x mnist" in proc.stderr.strip().splitlines()[-1]
    assert "cannot separate" in proc.stdout  # the table is printed before the refusal


def test_strict_accepts_the_paper_config_and_refuses_its_old_network(tmp_path, capsys):
    """configs/paper.yaml's cells all separate the policies or are controls; the same grid on
    one 10 GbE server moving ImageNet's gradient cannot, and --strict says so in one line."""
    config = yaml.safe_load((REPO / "configs/paper.yaml").read_text())
    data = tmp_path / "data"
    for folder in ("cifar-10-batches-py", "imagenet/train", "imagenet/val"):
        (data / folder).mkdir(parents=True)  # --strict checks the data folders too
    config["train"]["data_dir"] = str(data)
    paper = tmp_path / "paper.yaml"
    paper.write_text(yaml.safe_dump(config))
    proc = bdsgd_in_process(capsys, "plan", "--config", paper, "--strict")
    assert proc.returncode == 0, proc.stderr
    verdicts = Counter(line.split()[-1] for line in proc.stdout.splitlines()
                       if line.startswith(("sim-", "pai-")) and "/" not in line)
    assert verdicts == {"informative": 2, "control": 4}, proc.stdout
    config["network"] = {"topology": "ps", "bandwidth_gbit_s": 10.0, "latency_s": 5.0e-5}
    old = tmp_path / "old.yaml"
    old.write_text(yaml.safe_dump(config))
    proc = bdsgd_in_process(capsys, "plan", "--config", old, "--strict")
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1
    assert f"{old}: network: cannot separate" in proc.stderr
    assert "sim-straggler x imagenet" in proc.stderr
