# Stage 5: every figure and the summary tables, from stored results only (so they can be
# redrawn from a results folder copied off a cluster: bdsgd figures results/<exp> --out ...).
# The files and their report entries come from bdsgd.figures' table (common.smk).


rule figures:
    input:
        runs=run_targets(),
        throughput=expand(PATHS.throughput(), trace=config["traces"]),
        comm_sweep=expand(PATHS.throughput(file="comm_sweep.csv"), trace=config["traces"]),
        period_sweep=expand(PATHS.throughput(file="period_sweep.csv"), trace=config["traces"]),
        evaluations=expand(PATHS.model(file="evaluation.json"), trace=config["traces"]),
        predictions=expand(PATHS.model(file="predictions.parquet"), trace=config["traces"]),
        describe=expand(PATHS.describe(), trace=config["traces"]),
        ablations=ablation_outputs(),
        config=PATHS.config(),  # its figure_note, printed over every figure; train.gradient_s:
        # a normalised trace's seconds (decision_overhead)
        distributed=[PATHS.distributed(job, file) for job in DIST
                     for file in ("result.json", "result.metrics.parquet", "result.trace.parquet",
                                 "result.replay.parquet")],
    output:
        **figure_outputs(),
    log:
        PATHS.figures_log(),
    params:
        results=lambda wc, input: Path(input.describe[0]).parents[2],
        figures=lambda wc, output: Path(output.summary).parent,
    conda:
        "../envs/bdsgd.yaml"
    shell:
        "bdsgd figures {params.results} --out {params.figures} > {log} 2>&1"


# The throughput study over cluster draws (throughput.draws): from the throughput replays alone,
# so a config without convergence runs draws it as its target (configs/throughput-158.yaml).
rule throughput_study:
    input:
        throughput=expand(PATHS.throughput(), trace=config["traces"]),
        draws=draw_targets(),
        config=PATHS.config(),  # its figure_note
    output:
        **draw_figure_outputs(),
    log:
        PATHS.log("figures", "throughput_study"),
    params:
        results=lambda wc, input: Path(input.config).parent,
        figures=lambda wc, output: Path(output.throughput_study).parent,
    conda:
        "../envs/bdsgd.yaml"
    shell:
        "bdsgd figures {params.results} --out {params.figures} --draws > {log} 2>&1"


rule trace_figures:
    input:
        PATHS.trace(),
    output:
        **trace_figure_outputs(),
    log:
        PATHS.figures_log("{trace}"),
    params:
        out=lambda wc, output: Path(output[0]).parent,
        note=note_flag(),
    conda:
        "../envs/bdsgd.yaml"
    shell:
        "bdsgd traces plot {input} --name {wildcards.trace} --out {params.out} {params.note} "
        "> {log} 2>&1"


# The finished workflow's verdicts on the console: each policy against its references, paired
# (bdsgd.figures.verdicts; the same table as verdicts.csv).
onsuccess:
    from bdsgd.figures.verdicts import format_table, read_table

    for verdicts in (FIGURE_TABLE["verdicts"][0], DRAW_FIGURE_TABLE["draw_verdicts"][0]):
        if Path(PATHS.figure(verdicts)).exists():
            print(format_table(read_table(PATHS.figure(verdicts))))
