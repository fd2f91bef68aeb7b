# Stage 3: replay each trace's test part under every cutoff policy (both decision rules).


rule throughput:
    input:
        config=CONFIG_FILE,
        trace=f"{RESULTS}/traces/{{trace}}/test.parquet",
        model=lambda wc: model_input(wc.trace, config["throughput"]["policies"]),
    output:
        json=f"{RESULTS}/throughput/{{trace}}/throughput.json",
        decisions=f"{RESULTS}/throughput/{{trace}}/decisions.parquet",
    log:
        f"{LOGS}/throughput/{{trace}}.log",
    params:
        policies=throughput_policies(),
        model=lambda wc, input: f"--model {input.model}" if input.model else "",
    conda:
        "../../environment.yml"
    shell:
        "bdsgd throughput {input.trace} --policies {params.policies} {params.model} --rule both "
        "--config {input.config} --json {output.json} --decisions {output.decisions} > {log} 2>&1"
