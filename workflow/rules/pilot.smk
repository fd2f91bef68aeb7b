# Stage 3b: the pilot (bdsgd.training.pilot), one per task and cluster size: sync runs of the
# recipe at its learning rate and pilot.lr_factors around it, on the first convergence trace of
# that size (bdsgd.plan.preflight.pilot_traces). Every convergence run of the task on a trace of that
# size waits for it (train.smk: pilot_input), so a recipe that cannot reach its target stops the
# workflow here, with the pilot's one line, before the grid starts.


rule pilot:
    input:
        config=PATHS.stage_config("pilot", RUN_CONFIG),
        trace=PATHS.trace("{trace}", "test"),
        history=PATHS.trace("{trace}", "train"),
    output:
        PATHS.pilot(),
    log:
        PATHS.pilot_log(),
    wildcard_constraints:
        trace=one_of(set(PILOT_TRACES.values())),
    params:
        out=lambda wc: str(Path(PATHS.pilot(wc.trace, wc.task)).parent),
    threads: TRAIN["threads"]
    resources:
        gpu=0 if TRAIN["device"] == "cpu" else RES["train_gpus"],
        mem_mb=RES["train_mem_mb"],
        runtime=RES["train_runtime_min"],
    conda:
        "../envs/bdsgd.yaml"
    # exec: SIGTERM reaches bdsgd, which checkpoints the run at hand, as train's (profiles/slurm).
    # Its error names the user's config (from the environment: a param would rerun the pilot
    # whenever the config file moves); onerror below shows its one line.
    shell:
        "exec bdsgd pilot --config {input.config} --task {wildcards.task} --trace {input.trace} "
        '--history {input.history} --out {params.out} --source "$BDSGD_CONFIG_SOURCE" > {log} 2>&1'


# A failed pilot's one line (its log's last) on the terminal, where Snakemake names only the log.
onerror:
    for task in TRAIN["tasks"]:
        for trace in set(PILOT_TRACES.values()):
            log = Path(PATHS.pilot_log(trace, task))
            if log.exists() and not Path(PATHS.pilot(trace, task)).exists():
                last = (log.read_text().strip().splitlines() or [""])[-1]
                if last.startswith("bdsgd: error:"):
                    print(last, file=sys.stderr)
