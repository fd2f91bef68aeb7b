# Stage 6: real distributed jobs from distributed.jobs: a parameter server and its workers on
# torch.distributed (bdsgd distributed), each writing its result, per-iteration metrics, the
# run-time trace it recorded and the virtual clock's run of that trace under a fresh policy. One
# task per process (workers + 1): under the SLURM executor the job asks for that many tasks and,
# with resources.distributed_launcher: srun, runs as one srun step of them (the executor's mpi
# convention); locally bdsgd starts the processes itself.


rule distributed:
    input:
        config=PATHS.stage_config("distributed", "{job}"),
        model=lambda wc: model_input(TRAIN_TRACES[0], [DIST[wc.job]["policy"]]),
        paper_model=lambda wc: model_input(TRAIN_TRACES[0], [DIST[wc.job]["policy"]], "paper.pt"),
    output:
        result=PATHS.distributed(),
        metrics=PATHS.distributed(file="result.metrics.parquet"),
        trace=PATHS.distributed(file="result.trace.parquet"),
        replay=PATHS.distributed(file="result.replay.parquet"),
    log:
        PATHS.distributed_log(),
    params:
        flags=lambda wc: distributed_flags(wc.job),
        model=lambda wc, input: model_flags(input),
        launch=lambda wc, resources: (f"{resources.mpi} -n {resources.tasks}"
                                      if RES["distributed_launcher"] == "srun" else ""),
    # locally: one core per process
    threads: lambda wc: DIST[wc.job]["workers"] + 1
    resources:
        tasks=lambda wc: DIST[wc.job]["workers"] + 1,
        mpi="srun",
        gpus_per_task=RES["distributed_gpus_per_task"],
        # the SLURM executor maps only gpu (a job total, with --ntasks-per-gpu=tasks) and gres:
        # a GPU per rank needs sbatch's own flag
        slurm_extra=(f"--gpus-per-task={RES['distributed_gpus_per_task']}"
                     if RES["distributed_gpus_per_task"] else ""),
        mem_mb=RES["distributed_mem_mb"],
        runtime=RES["distributed_runtime_min"],
    conda:
        "../envs/bdsgd.yaml"
    shell:
        "{params.launch} bdsgd distributed --config {input.config} {params.flags} {params.model} "
        "--json {output.result} > {log} 2>&1"
