#!/usr/bin/env bash
# Snakemake runs this in the environment it built from bdsgd.yaml (environment.yml), from its
# copy in .snakemake/conda/, so the checkout's path comes from the workflow: common.smk exports
# it as BDSGD_PROJECT. Editable, so the environment follows the checkout's code; --no-deps, as
# bdsgd.yaml already pins every dependency.
set -euo pipefail
pip install --no-deps --editable "${BDSGD_PROJECT:?not set: Snakemake runs this script through the workflow}"
