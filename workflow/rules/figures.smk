# Stage 5: every figure and the summary tables, from stored results only (so they can be
# redrawn from a results folder copied off a cluster: bdsgd figures results/<exp> --out ...).


rule figures:
    input:
        runs=run_targets(),
        throughput=expand(f"{RESULTS}/throughput/{{trace}}/throughput.json", trace=config["traces"]),
        evaluations=expand(f"{RESULTS}/models/{{trace}}/evaluation.json", trace=config["traces"]),
        predictions=expand(f"{RESULTS}/models/{{trace}}/predictions.parquet", trace=config["traces"]),
        describe=expand(f"{RESULTS}/traces/{{trace}}/describe.json", trace=config["traces"]),
    output:
        tta=report(f"{FIGURES}/time_to_accuracy.png", caption="../report/time_to_accuracy.rst", category="Convergence"),
        cutoff=report(f"{FIGURES}/cutoff_over_time.png", caption="../report/cutoff_over_time.rst", category="Policies"),
        throughput=report(f"{FIGURES}/throughput.png", caption="../report/throughput.rst", category="Policies"),
        runtimes=report(f"{FIGURES}/runtime_distributions.png", caption="../report/runtime_distributions.rst", category="Traces"),
        predictions=report(f"{FIGURES}/model_predictions.png", caption="../report/model_predictions.rst", category="Run-time model"),
        summary=report(f"{FIGURES}/summary.csv", caption="../report/summary.rst", category="Tables"),
        throughput_summary=report(f"{FIGURES}/throughput_summary.csv", caption="../report/throughput_summary.rst", category="Tables"),
    log:
        f"{LOGS}/figures.log",
    params:
        results=lambda wc, input: Path(input.describe[0]).parents[2],
        figures=lambda wc, output: Path(output.summary).parent,
    conda:
        "../../environment.yml"
    shell:
        "bdsgd figures {params.results} --out {params.figures} > {log} 2>&1"


rule trace_figures:
    input:
        f"{RESULTS}/traces/{{trace}}/trace.parquet",
    output:
        cdf=report(f"{FIGURES}/traces/{{trace}}_runtime_cdf.png", caption="../report/trace_cdf.rst", category="Traces", subcategory="{trace}"),
        heatmap=report(f"{FIGURES}/traces/{{trace}}_heatmap.png", caption="../report/trace_heatmap.rst", category="Traces", subcategory="{trace}"),
        cov=report(f"{FIGURES}/traces/{{trace}}_cov.png", caption="../report/trace_cov.rst", category="Traces", subcategory="{trace}"),
    log:
        f"{LOGS}/figures/{{trace}}.log",
    params:
        out=lambda wc, output: Path(output.cdf).parent,
    conda:
        "../../environment.yml"
    shell:
        "bdsgd traces plot {input} --name {wildcards.trace} --out {params.out} > {log} 2>&1"
