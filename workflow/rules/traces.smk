# Stage 1: worker run-time traces, from one of three sources, then cut in time into a part that
# trains the run-time model and a part on which the policies are replayed. Also the config files
# of every stage (common.smk: config_slice) and the whole resolved config, for the record.


rule resolved_config:
    localrule: True
    output:
        CONFIG_FILE,
    log:
        f"{LOGS}/config.log",
    params:
        text=yaml.safe_dump(config, sort_keys=True),
    conda:
        "../envs/bdsgd.yaml"
    shell:
        "printf '%s' {params.text:q} > {output} 2> {log}"


rule stage_config:
    localrule: True
    output:
        stage_config("{stage}", "{name}"),
    log:
        f"{LOGS}/config/{{stage}}/{{name}}.log",
    wildcard_constraints:
        stage="|".join(STAGES),
        name="[^/]+",
    params:
        text=lambda wc: config_slice(wc.stage, wc.name),
    conda:
        "../envs/bdsgd.yaml"
    shell:
        "printf '%s' {params.text:q} > {output} 2> {log}"


rule simulate_trace:
    input:
        stage_config("simulate_trace", "{trace}"),
    output:
        trace=f"{RESULTS}/traces/{{trace}}/trace.parquet",
        truth=f"{RESULTS}/traces/{{trace}}/trace.truth.npz",
    log:
        f"{LOGS}/traces/{{trace}}/simulate.log",
    wildcard_constraints:
        trace=traces_from("simulate"),
    threads: 1
    resources:
        mem_mb=RES["simulate_mem_mb"],
        runtime=RES["simulate_runtime_min"],
    conda:
        "../envs/bdsgd.yaml"
    shell:
        "bdsgd traces simulate --config {input} --name {wildcards.trace} --out {output.trace} > {log} 2>&1"


rule import_trace:
    input:
        lambda wc: config["traces"][wc.trace]["path"],
    output:
        f"{RESULTS}/traces/{{trace}}/trace.parquet",
    log:
        f"{LOGS}/traces/{{trace}}/import.log",
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
        stage_config("gather_trace", "{trace}"),
    output:
        f"{RESULTS}/traces/{{trace}}/trace.parquet",
    log:
        f"{LOGS}/traces/{{trace}}/gather.log",
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
        trace=f"{RESULTS}/traces/{{trace}}/trace.parquet",
    output:
        train=f"{RESULTS}/traces/{{trace}}/train.parquet",
        test=f"{RESULTS}/traces/{{trace}}/test.parquet",
    log:
        f"{LOGS}/traces/{{trace}}/split.log",
    wildcard_constraints:
        trace=traces_from("import", "gather"),
    params:
        fraction=lambda wc: config["traces"][wc.trace]["train_fraction"],
    conda:
        "../envs/bdsgd.yaml"
    shell:
        "bdsgd traces split {input.trace} --train-fraction {params.fraction} "
        "--train {output.train} --test {output.test} > {log} 2>&1"


# A simulated trace's latent state goes with it: split writes a copy beside each part (the
# throughput stage's bayes reads the test part's).
use rule split_trace as split_simulated_trace with:
    input:
        trace=f"{RESULTS}/traces/{{trace}}/trace.parquet",
        truth=f"{RESULTS}/traces/{{trace}}/trace.truth.npz",
    output:
        train=f"{RESULTS}/traces/{{trace}}/train.parquet",
        test=f"{RESULTS}/traces/{{trace}}/test.parquet",
        train_truth=f"{RESULTS}/traces/{{trace}}/train.truth.npz",
        test_truth=f"{RESULTS}/traces/{{trace}}/test.truth.npz",
    wildcard_constraints:
        trace=traces_from("simulate"),


rule describe_trace:
    input:
        f"{RESULTS}/traces/{{trace}}/trace.parquet",
    output:
        f"{RESULTS}/traces/{{trace}}/describe.json",
    log:
        f"{LOGS}/traces/{{trace}}/describe.log",
    conda:
        "../envs/bdsgd.yaml"
    shell:
        "bdsgd traces describe --json {input} > {output} 2> {log}"
