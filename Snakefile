# bdsgd: the whole evaluation as one DAG.
#   traces (gather | import | simulate) -> split -> run-time model -> throughput of every policy
#   -> convergence runs (task x policy x seed) -> figures and summary.csv
#   and real distributed jobs (a parameter server and workers on torch.distributed)
# Run with a profile, which names the config:  snakemake --profile profiles/smoke
import sys

from snakemake.utils import min_version, validate

from bdsgd.config import from_dict
from bdsgd.errors import UserError

min_version("9.0")


if not config:
    raise ValueError("no config: run with --profile profiles/<name> or --configfile configs/<name>.yaml")


CONFIG_FILE = str(workflow.configfiles[-1]) if workflow.configfiles else "config"
try:  # a schema error as the CLI's one line, naming the user's file and key
    from_dict(config, CONFIG_FILE)
except UserError as exc:
    sys.exit(f"bdsgd: error: {exc}")
validate(config, "workflow/schemas/config.schema.yaml")  # fills in the schema's defaults
if "train" not in config:  # the schema lets a stage's own config leave it out, not the workflow's
    raise ValueError("config: train: is required (the convergence runs; see the schema)")


include: "workflow/rules/common.smk"
include: "workflow/rules/config.smk"
include: "workflow/rules/traces.smk"
include: "workflow/rules/runtime_model.smk"
include: "workflow/rules/throughput.smk"
include: "workflow/rules/ablations.smk"
include: "workflow/rules/pilot.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/distributed.smk"
include: "workflow/rules/figures.smk"


# What every wildcard may be, in one place: each names something in the config (stage: a stage of
# bdsgd.config.stages.STAGE_READS; name: its instance). A rule's own wildcard_constraints only pick, of
# the traces, those of the sources it makes.
wildcard_constraints:
    trace=f"{one_of(config['traces'])}|{traces_from('simulate')}",
    task=one_of(TRAIN["tasks"]),
    policy=one_of(TRAIN["policies"]),
    seed=r"\d+",
    draw=r"[1-9]\d*",
    job=one_of(DIST),
    stage=one_of(STAGES),
    censoring=one_of(CENSORING),
    late=one_of(LATE),
    kind=one_of(TRAINED),
    name="[^/]+",


rule all:
    input:
        all_targets(),
    default_target: True
