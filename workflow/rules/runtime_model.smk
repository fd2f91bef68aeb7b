# Stage 2: the BDSGD run-time model, trained on the first part of each trace and evaluated on
# the rest (held-out likelihood, interval coverage, throughput as a policy).


rule train_model:
    input:
        config=CONFIG_FILE,
        trace=f"{RESULTS}/traces/{{trace}}/train.parquet",
    output:
        f"{RESULTS}/models/{{trace}}/model.pt",
    log:
        f"{LOGS}/models/{{trace}}/train.log",
    conda:
        "../../environment.yml"
    shell:
        "bdsgd model train {input.trace} --config {input.config} --out {output} --quiet > {log} 2>&1"


rule evaluate_model:
    input:
        config=CONFIG_FILE,
        model=f"{RESULTS}/models/{{trace}}/model.pt",
        trace=f"{RESULTS}/traces/{{trace}}/test.parquet",
    output:
        json=f"{RESULTS}/models/{{trace}}/evaluation.json",
        predictions=f"{RESULTS}/models/{{trace}}/predictions.parquet",
    log:
        f"{LOGS}/models/{{trace}}/evaluate.log",
    conda:
        "../../environment.yml"
    shell:
        "bdsgd model evaluate {input.model} {input.trace} --config {input.config} "
        "--json {output.json} --predictions {output.predictions} > {log} 2>&1"
