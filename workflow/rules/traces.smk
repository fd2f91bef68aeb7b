# Stage 1: worker run-time traces, from one of three sources, then cut in time into a part that
# trains the run-time model and a part on which the policies are replayed. A trace's rule is
# picked by its source (each rule's wildcard_constraints).


# A simulated trace, or a cluster drawn from its scenario for run seed s (<trace>/draw<s>: the
# config's seed + s; common.smk: traces_from).
rule simulate_trace:
    input:
        lambda wc: PATHS.stage_config("simulate_trace", drawn_from(wc.trace)[0]),
    output:
        trace=PATHS.trace(),
        truth=PATHS.truth(),
    log:
        PATHS.trace_log("simulate"),
    wildcard_constraints:
        trace=traces_from("simulate"),
    params:
        name=lambda wc: drawn_from(wc.trace)[0],
        seed=lambda wc: config["seed"] + drawn_from(wc.trace)[1],
    threads: 1
    resources:
        mem_mb=RES["simulate_mem_mb"],
        runtime=RES["simulate_runtime_min"],
    conda:
        "../envs/bdsgd.yaml"
    shell:
        "bdsgd traces simulate --config {input} --name {params.name} --seed {params.seed} "
        "--out {output.trace} > {log} 2>&1"


rule import_trace:
    input:
        lambda wc: config["traces"][wc.trace]["path"],
    output:
        PATHS.trace(),
    log:
        PATHS.trace_log("import"),
    wildcard_constraints:
        trace=traces_from("import"),
    params:
        format=lambda wc: config["traces"][wc.trace]["format"],
    conda:
        "../envs/bdsgd.yaml"
    shell:
        "bdsgd traces import --format {params.format} {input} {output} > {log} 2>&1"


rule gather_trace:
    input:
        PATHS.stage_config("gather_trace", "{trace}"),
    output:
        PATHS.trace(),
    log:
        PATHS.trace_log("gather"),
    wildcard_constraints:
        trace=traces_from("gather"),
    params:
        data_dir=TRAIN["data_dir"],
    # locally: one core per worker (bdsgd starts them with torchrun)
    threads: lambda wc: gather_workers(wc.trace)
    resources:
        # under the SLURM executor: a task per worker, and mpi so that the executor runs the
        # command as it is (not in `srun -n1`, whose SLURM_PROCID would make bdsgd one worker)
        tasks=lambda wc: gather_workers(wc.trace),
        mpi="srun",
        mem_mb=RES["gather_mem_mb"],
        runtime=RES["gather_runtime_min"],
    conda:
        "../envs/bdsgd.yaml"
    shell:
        "bdsgd traces gather --config {input} --name {wildcards.trace} --data-dir {params.data_dir:q} "
        "--out {output} > {log} 2>&1"


rule split_trace:
    input:
        trace=PATHS.trace(),
    output:
        train=PATHS.trace(part="train"),
        test=PATHS.trace(part="test"),
    log:
        PATHS.trace_log("split"),
    wildcard_constraints:
        trace=traces_from("import", "gather"),
    params:
        fraction=lambda wc: spec_of(wc.trace)["train_fraction"],
    conda:
        "../envs/bdsgd.yaml"
    shell:
        "bdsgd traces split {input.trace} --train-fraction {params.fraction} "
        "--train {output.train} --test {output.test} > {log} 2>&1"


# A simulated trace's latent state goes with it: split writes a copy beside each part (the
# throughput stage's bayes reads the test part's).
use rule split_trace as split_simulated_trace with:
    input:
        trace=PATHS.trace(),
        truth=PATHS.truth(),
    output:
        train=PATHS.trace(part="train"),
        test=PATHS.trace(part="test"),
        train_truth=PATHS.truth(part="train"),
        test_truth=PATHS.truth(part="test"),
    wildcard_constraints:
        trace=traces_from("simulate"),


rule describe_trace:
    input:
        PATHS.trace(),
    output:
        PATHS.describe(),
    log:
        PATHS.trace_log("describe"),
    conda:
        "../envs/bdsgd.yaml"
    shell:
        "bdsgd traces describe --json {input} > {output} 2> {log}"
