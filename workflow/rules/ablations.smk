# Stage 3b: the replay ablations of throughput.ablations, on its traces. Censoring: the training
# part as a server with backup workers records it, a run-time model trained on it per way of
# scoring censored run-times, each replayed. The data a policy buys: the policy with and without
# explore-, late workers abandoning or finishing their gradient.


rule censor_trace:
    input:
        PATHS.trace(part="train"),
    output:
        PATHS.trace(part="train-censored"),
    log:
        PATHS.trace_log("censor"),
    params:
        backups=ABLATIONS["backups"],
    conda:
        "../envs/bdsgd.yaml"
    shell:
        "bdsgd traces censor {input} --backups {params.backups} --out {output} > {log} 2>&1"


use rule train_model as train_censored_model with:
    input:
        config=PATHS.stage_config("train_model", "{trace}"),
        trace=PATHS.trace(part="train-censored"),
        prior=prior_input(),
    output:
        PATHS.model(file="censored-{censoring}.pt"),
    log:
        PATHS.model_log("train_censored_{censoring}"),
    params:
        paper=lambda wc: f"--censoring {wc.censoring}",
        prior=lambda wc, input: prior_flag(input),


rule censoring_replay:
    input:
        config=PATHS.stage_config("throughput", "{trace}"),
        trace=PATHS.trace(part="test"),
        history=PATHS.trace(part="train"),
        model=PATHS.model(file="censored-{censoring}.pt"),
    output:
        json=PATHS.throughput(file="censored-{censoring}.json"),
        decisions=PATHS.throughput(file="censored-{censoring}.parquet"),
    log:
        PATHS.log("throughput", "{trace}", "censored-{censoring}"),
    params:
        policies=ABLATIONS["policy"],
        late="",
    threads: RES["throughput_threads"]
    resources:
        mem_mb=RES["throughput_mem_mb"],
        runtime=RES["throughput_runtime_min"],
    conda:
        "../envs/bdsgd.yaml"
    shell:
        "bdsgd throughput {input.trace} --policies {params.policies} --model {input.model} "
        "--history {input.history} --config {input.config} --json {output.json} "
        "--decisions {output.decisions} {params.late} > {log} 2>&1"


use rule censoring_replay as late_replay with:
    input:
        config=PATHS.stage_config("throughput", "{trace}"),
        trace=PATHS.trace(part="test"),
        history=PATHS.trace(part="train"),
        model=PATHS.model(),
    output:
        json=PATHS.throughput(file="late-{late}.json"),
        decisions=PATHS.throughput(file="late-{late}.parquet"),
    log:
        PATHS.log("throughput", "{trace}", "late-{late}"),
    params:
        policies=f"{ABLATIONS['policy']},explore-{ABLATIONS['policy']}",
        late=lambda wc: f"--late {wc.late}",


# The ladder from Teng & Wood's BDSGD to the project's (bdsgd/ladder.py): the models only it
# reads, each trained on the trace alone as the paper's is (bdsgd.ladder.TRAINED), then every
# rung replayed.
use rule train_model as train_ladder_model with:
    input:
        config=PATHS.stage_config("train_model", "{trace}"),
        trace=PATHS.trace(part="train"),
    output:
        PATHS.model(file="ladder-{kind}.pt"),
    log:
        PATHS.model_log("train_ladder_{kind}"),
    params:
        paper=lambda wc: TRAINED[wc.kind],
        prior="",


rule ladder:
    input:
        config=PATHS.stage_config("throughput", "{trace}"),
        trace=PATHS.trace(part="test"),
        history=PATHS.trace(part="train"),
        paper=PATHS.model(file="paper.pt"),
        **{kind: PATHS.model(file=f"ladder-{kind}.pt") for kind in TRAINED},
        model=PATHS.model(),
    output:
        json=PATHS.throughput(file="ladder.json"),
        decisions=PATHS.throughput(file="ladder.parquet"),
    log:
        PATHS.log("throughput", "{trace}", "ladder"),
    params:
        trained=lambda wc, input: " ".join(f"--{kind}-model {input[kind]}" for kind in TRAINED),
    threads: RES["throughput_threads"]
    resources:
        mem_mb=RES["throughput_mem_mb"],
        runtime=RES["throughput_runtime_min"],
    conda:
        "../envs/bdsgd.yaml"
    shell:
        "bdsgd ladder {input.trace} --history {input.history} --config {input.config} "
        "--paper-model {input.paper} {params.trained} --model {input.model} "
        "--json {output.json} --decisions {output.decisions} > {log} 2>&1"
