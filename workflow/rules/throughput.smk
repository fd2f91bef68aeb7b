# Stage 3: replay each trace's test part under every cutoff policy (both decision rules); the
# learning policies first see the training part, as the server that gathered it would have.
# The communication sweep replays them again on networks from cheap to dominant communication,
# the period sweep a few of them deciding only every k-th iteration.


rule throughput:
    input:
        config=PATHS.stage_config("throughput", "{trace}"),
        trace=PATHS.trace(part="test"),
        history=PATHS.trace(part="train"),
        model=lambda wc: model_input(wc.trace, config["throughput"]["policies"]),
        paper_model=lambda wc: model_input(wc.trace, config["throughput"]["policies"], "paper.pt"),
        truth=lambda wc: truth_input(wc.trace, config["throughput"]["policies"]),
    output:
        json=PATHS.throughput(),
        decisions=PATHS.throughput(file="decisions.parquet"),
        comm_sweep=PATHS.throughput(file="comm_sweep.csv"),
        period_sweep=PATHS.throughput(file="period_sweep.csv"),
    log:
        PATHS.throughput_log(),
    params:
        policies=throughput_policies(),
        model=lambda wc, input: model_flags(input),
    threads: RES["throughput_threads"]
    resources:
        mem_mb=RES["throughput_mem_mb"],
        runtime=RES["throughput_runtime_min"],
    conda:
        "../envs/bdsgd.yaml"
    shell:
        # bdsgd throughput reads the truth beside the test part itself (bdsgd.policies.build.load_inputs)
        "bdsgd throughput {input.trace} --policies {params.policies} {params.model} --rule both "
        "--history {input.history} --config {input.config} --json {output.json} "
        "--decisions {output.decisions} --comm-sweep {output.comm_sweep} --period-sweep {output.period_sweep} > {log} 2>&1"
