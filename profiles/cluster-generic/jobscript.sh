#!/bin/bash
# properties = {properties}
# The batch step's own task variables (SLURM_PROCID=0, SLURM_NTASKS) would make a bdsgd command
# started here take itself for one rank of an srun step: drop them, as the SLURM executor does.
# bdsgd then launches its processes itself, or its `srun -n N` sets them for each task.
unset SLURM_PROCID SLURM_NTASKS SLURM_NPROCS SLURM_LOCALID SLURM_NODEID
echo "SLURM job $SLURM_JOB_ID on $(hostname)"
{exec_job}
