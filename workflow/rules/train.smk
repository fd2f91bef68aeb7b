# Stage 4: convergence runs on the virtual cluster (trace x task x policy x seed), whose clock is
# driven by the test part of a trace of train.trace (of a simulated trace, the cluster drawn for
# the run's seed: CFG.cluster_of); policies that learn from observations first see its training
# part (--history), as the server that gathered it would have. A run reads its task's and trace's
# config (not the lists of traces, tasks, policies or seeds): one more adds runs and reruns none.


rule train:
    input:
        config=PATHS.stage_config("train", RUN_CONFIG),
        trace=lambda wc: PATHS.trace(cluster(wc), "test"),
        history=lambda wc: PATHS.trace(cluster(wc), "train"),
        model=lambda wc: model_input(cluster(wc), [wc.policy]),
        paper_model=lambda wc: model_input(cluster(wc), [wc.policy], "paper.pt"),
        truth=lambda wc: truth_input(cluster(wc), [wc.policy]),
        pilot=pilot_input,
    output:
        result=PATHS.run("result.json"),
        metrics=PATHS.run("metrics.parquet"),
        network=PATHS.run("model.pt"),
    log:
        PATHS.run_log(),
    wildcard_constraints:
        trace=one_of(TRAIN_TRACES),
    params:
        model=lambda wc, input: model_flags(input),
        out=lambda wc: PATHS.run_dir(wc.trace, wc.task, wc.policy, wc.seed),
    # the run sets torch's threads to train.threads
    threads: TRAIN["threads"]
    resources:
        gpu=0 if TRAIN["device"] == "cpu" else RES["train_gpus"],
        mem_mb=RES["train_mem_mb"],
        runtime=RES["train_runtime_min"],
    conda:
        "../envs/bdsgd.yaml"
    # exec: SIGTERM before a SLURM time limit reaches bdsgd, which checkpoints, with no shell
    # between it and Snakemake to die of the signal first (profiles/slurm)
    shell:
        "exec bdsgd train --config {input.config} --task {wildcards.task} "
        "--policy {wildcards.policy} --seed {wildcards.seed} --trace {input.trace} "
        "--history {input.history} {params.model} --out {params.out} > {log} 2>&1"
