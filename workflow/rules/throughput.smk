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
    wildcard_constraints:
        trace=one_of(config["traces"]),  # a draw's is throughput_draw's
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


# The throughput study (throughput.draws): every policy replayed on each further cluster draw of
# each trace, so that every comparison is paired over draws (bdsgd.figures.draws). A simulated
# trace's draw is its scenario drawn again, with its own training part and models; a recorded
# trace's is its test part started elsewhere (bdsgd throughput --draw).
rule throughput_draw:
    input:
        config=PATHS.stage_config("throughput", "{trace}"),
        trace=lambda wc: PATHS.trace(drawn(wc), part="test"),
        history=lambda wc: PATHS.trace(drawn(wc), part="train"),
        model=lambda wc: model_input(drawn(wc), config["throughput"]["policies"]),
        paper_model=lambda wc: model_input(drawn(wc), config["throughput"]["policies"], "paper.pt"),
        truth=lambda wc: truth_input(drawn(wc), config["throughput"]["policies"]),
    output:
        PATHS.throughput(DRAWN),
    log:
        PATHS.throughput_log(DRAWN),
    wildcard_constraints:
        trace=one_of(config["traces"]),
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
        "bdsgd throughput {input.trace} --policies {params.policies} {params.model} "
        "--history {input.history} --config {input.config} --draw {wildcards.draw} "
        "--json {output} > {log} 2>&1"
