# Stage 2: the BDSGD run-time model, trained on the first part of each trace and evaluated on
# the rest (held-out likelihood, interval coverage, throughput as a policy). Both run on CPU
# (torch, model_threads threads through OMP_NUM_THREADS, which Snakemake sets to {threads}).


rule train_model:
    input:
        config=stage_config("train_model", "{trace}"),
        trace=f"{RESULTS}/traces/{{trace}}/train.parquet",
    output:
        f"{RESULTS}/models/{{trace}}/model.pt",
    log:
        f"{LOGS}/models/{{trace}}/train.log",
    threads: RES["model_threads"]
    resources:
        mem_mb=RES["model_mem_mb"],
        runtime=RES["model_runtime_min"],
    conda:
        "../envs/bdsgd.yaml"
    shell:
        "bdsgd model train {input.trace} --config {input.config} --out {output} --quiet "
        "--trace-name {wildcards.trace} > {log} 2>&1"


rule evaluate_model:
    input:
        config=stage_config("evaluate_model", "{trace}"),
        model=f"{RESULTS}/models/{{trace}}/model.pt",
        trace=f"{RESULTS}/traces/{{trace}}/test.parquet",
    output:
        json=f"{RESULTS}/models/{{trace}}/evaluation.json",
        predictions=f"{RESULTS}/models/{{trace}}/predictions.parquet",
    log:
        f"{LOGS}/models/{{trace}}/evaluate.log",
    threads: RES["model_threads"]
    resources:
        mem_mb=RES["model_mem_mb"],
        runtime=RES["model_runtime_min"],
    conda:
        "../envs/bdsgd.yaml"
    shell:
        "bdsgd model evaluate {input.model} {input.trace} --config {input.config} "
        "--json {output.json} --predictions {output.predictions} > {log} 2>&1"
