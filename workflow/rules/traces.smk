# Stage 1: worker run-time traces, from one of three sources, then cut in time into a part that
# trains the run-time model and a part on which the policies are replayed.


rule resolved_config:
    output:
        CONFIG_FILE,
    log:
        f"{LOGS}/config.log",
    params:
        text=yaml.safe_dump(config, sort_keys=True),
    conda:
        "../../environment.yml"
    shell:
        "printf '%s' {params.text:q} > {output} 2> {log}"



rule simulate_trace:
    input:
        CONFIG_FILE,
    output:
        trace=f"{RESULTS}/traces/{{trace}}/trace.parquet",
        truth=f"{RESULTS}/traces/{{trace}}/trace.truth.npz",
    log:
        f"{LOGS}/traces/{{trace}}/simulate.log",
    wildcard_constraints:
        trace=traces_from("simulate"),
    conda:
        "../../environment.yml"
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
        "../../environment.yml"
    shell:
        "bdsgd traces import --format {params.format} {input} {output} > {log} 2>&1"


rule gather_trace:
    input:
        CONFIG_FILE,
    output:
        f"{RESULTS}/traces/{{trace}}/trace.parquet",
    log:
        f"{LOGS}/traces/{{trace}}/gather.log",
    wildcard_constraints:
        trace=traces_from("gather"),
    threads: lambda wc: config["traces"][wc.trace]["gather"]["workers"]
    conda:
        "../../environment.yml"
    shell:
        "bdsgd traces gather --config {input} --name {wildcards.trace} --out {output} > {log} 2>&1"


rule split_trace:
    input:
        trace=f"{RESULTS}/traces/{{trace}}/trace.parquet",
        # A simulated trace's latent state; split writes a copy beside each part (bayes reads it).
        truth=lambda wc: truth_input(wc.trace),
    output:
        train=f"{RESULTS}/traces/{{trace}}/train.parquet",
        test=f"{RESULTS}/traces/{{trace}}/test.parquet",
    log:
        f"{LOGS}/traces/{{trace}}/split.log",
    params:
        fraction=lambda wc: config["traces"][wc.trace]["train_fraction"],
    conda:
        "../../environment.yml"
    shell:
        "bdsgd traces split {input.trace} --train-fraction {params.fraction} "
        "--train {output.train} --test {output.test} > {log} 2>&1"


rule describe_trace:
    input:
        f"{RESULTS}/traces/{{trace}}/trace.parquet",
    output:
        f"{RESULTS}/traces/{{trace}}/describe.json",
    log:
        f"{LOGS}/traces/{{trace}}/describe.log",
    conda:
        "../../environment.yml"
    shell:
        "bdsgd traces describe --json {input} > {output} 2> {log}"
