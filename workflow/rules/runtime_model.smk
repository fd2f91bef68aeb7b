# Stage 2: the BDSGD run-time model, trained on the first part of each trace and evaluated on
# the rest (held-out likelihood, interval coverage, throughput as a policy). Both run on CPU
# (torch, model_threads threads through OMP_NUM_THREADS, which Snakemake sets to {threads}).


# The prior over clusters (model.prior): one per experiment, from the simulator alone.
rule train_prior:
    input:
        config=PATHS.stage_config("train_prior", "prior"),
    output:
        PATHS.prior(),
    log:
        PATHS.model_log("train", "prior"),
    threads: RES["model_threads"]
    resources:
        mem_mb=RES["model_mem_mb"],
        runtime=RES["model_runtime_min"],
    conda:
        "../envs/bdsgd.yaml"
    shell:
        "exec bdsgd model prior --config {input.config} --out {output} --quiet > {log} 2>&1"


rule train_model:
    input:
        # a drawn cluster's model is trained as its trace's
        config=lambda wc: PATHS.stage_config("train_model", drawn_from(wc.trace)[0]),
        trace=PATHS.trace(part="train"),
        prior=prior_input(),
    output:
        PATHS.model(),
    log:
        PATHS.model_log("train"),
    params:
        paper="",
        prior=lambda wc, input: prior_flag(input),
    threads: RES["model_threads"]
    resources:
        mem_mb=RES["model_mem_mb"],
        runtime=RES["model_runtime_min"],
    conda:
        "../envs/bdsgd.yaml"
    # exec: as the train rule's, for SIGTERM before a SLURM time limit (checkpoint per epoch)
    shell:
        "exec bdsgd model train {input.trace} --config {input.config} --out {output} --quiet "
        "--trace-name {wildcards.trace} {params.paper} {params.prior} > {log} 2>&1"


# Teng & Wood's own model (policies.PAPER_MODEL), for bdsgd-paper: made where it reads one, as
# they trained it (on the trace alone: no prior).
use rule train_model as train_paper_model with:
    input:
        config=lambda wc: PATHS.stage_config("train_model", drawn_from(wc.trace)[0]),
        trace=PATHS.trace(part="train"),
    output:
        PATHS.model(file="paper.pt"),
    log:
        PATHS.model_log("train_paper"),
    params:
        paper="--paper",
        prior="",


rule evaluate_model:
    input:
        config=PATHS.stage_config("evaluate_model", "{trace}"),
        model=PATHS.model(),
        trace=PATHS.trace(part="test"),
    output:
        json=PATHS.model(file="evaluation.json"),
        predictions=PATHS.model(file="predictions.parquet"),
    log:
        PATHS.model_log("evaluate"),
    threads: RES["model_threads"]
    resources:
        mem_mb=RES["model_mem_mb"],
        runtime=RES["model_runtime_min"],
    conda:
        "../envs/bdsgd.yaml"
    shell:
        "bdsgd model evaluate {input.model} {input.trace} --config {input.config} "
        "--json {output.json} --predictions {output.predictions} > {log} 2>&1"
