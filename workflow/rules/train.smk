# Stage 4: convergence runs on the virtual cluster (task x policy x seed), whose clock is driven
# by the test part of the trace named in train.trace; policies that learn from observations
# first see its training part (--history), as the server that gathered it would have. A run
# reads its task's config (not the list of tasks, policies or seeds): one more seed or policy
# adds runs and reruns none.


rule train:
    input:
        config=PATHS.stage_config("train", "{task}"),
        trace=PATHS.trace(TRAIN["trace"], "test"),
        history=PATHS.trace(TRAIN["trace"], "train"),
        model=lambda wc: model_input(TRAIN["trace"], [wc.policy]),
        truth=lambda wc: truth_input(TRAIN["trace"], [wc.policy]),
    output:
        result=PATHS.run("result.json"),
        metrics=PATHS.run("metrics.parquet"),
        network=PATHS.run("model.pt"),
    log:
        PATHS.run_log(),
    params:
        model=lambda wc, input: f"--model {input.model}" if input.model else "",
        out=lambda wc: PATHS.run_dir(wc.task, wc.policy, wc.seed),
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
