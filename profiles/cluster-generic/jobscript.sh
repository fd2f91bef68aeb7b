#!/bin/bash
# properties = {properties}
# The batch step's own task variables (SLURM_PROCID=0, SLURM_NTASKS) would make a bdsgd command
# started here take itself for one rank of an srun step: drop them, as the SLURM executor does.
# bdsgd then launches its processes itself, or its `srun -n N` sets them for each task.
unset SLURM_PROCID SLURM_NTASKS SLURM_NPROCS SLURM_LOCALID SLURM_NODEID
echo "SLURM job $SLURM_JOB_ID on $(hostname)"
# SLURM's warning before a time limit (the profile's --signal=B:TERM@...) comes to this shell
# alone, and a shell runs a trap only once its foreground job is done: run the job in the
# background and pass the signal on to this shell's process group, the job's processes
# (Snakemake waits for its job; bdsgd checkpoints and stops). The job's own shell catches it
# too, to wait for Snakemake rather than die and leave it to be killed with the step.
trap 'trap "" TERM; kill -TERM 0' TERM
( trap : TERM; {exec_job} ) &
job=$!
wait "$job"
status=$?
while kill -0 "$job" 2>/dev/null; do  # the trap cut the wait short: the job still runs
    wait "$job"
    status=$?
done
exit "$status"
