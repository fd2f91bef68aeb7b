"""The README's "Reliability" counts, each produced here from the test matrix: the bad inputs
tried per class (every one a parametrised case that asserts exit status 2, one line naming the
file or flag and the field, and nothing left behind), and the faults injected (every one a test
that kills a job and asserts that the same command resumes it, nothing lost)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter

from tests.helpers import REPO

# class -> (test module, the matrix tests of that class in it)
CLASSES = {
    "traces": ("test_bad_input_files.py", (
        "test_parquet_trace_with_bad_content", "test_damaged_parquet_trace",
        "test_csv_import_with_bad_content", "test_unreadable_import_file",
        "test_alibaba_pai_import_with_bad_content",
        "test_a_trace_of_one_worker_is_refused_where_cutoffs_are_chosen")),
    "configs": ("test_bad_input_files.py", ("test_bad_config_file",
                                            "test_a_directory_as_config_is_one_line")),
    "flags of every subcommand": ("cli/test_bad_input_flags.py", ("test_flags",)),
    "numbers (flags and config keys)": ("cli/test_bad_input_flags.py", ("test_numbers",)),
    "output paths": ("cli/test_bad_input_flags.py", ("test_outputs",)),
    "checkpoints and models": ("test_bad_input_files.py", (
        "test_damaged_train_checkpoint", "test_damaged_model_training_checkpoint",
        "test_damaged_model_file", "test_damaged_distributed_server_checkpoint",
        "test_torch_advice_is_not_passed_on")),
    "a run-time model of another worker count": ("policies/test_build.py", (
        "test_a_model_of_another_worker_count_is_one_line",)),
    "results folders": ("test_bad_input_files.py", (
        "test_results_folder_with_a_bad_file", "test_results_folder_missing_a_stage")),
    "messages in bdsgd's terms": ("test_bad_input_files.py", (
        "test_a_missing_data_set_is_said_in_bdsgd_terms",
        "test_an_imported_csv_trace_is_named_by_its_file_not_its_format",
        "test_an_imported_pai_trace_is_named_by_its_file_not_its_format",
        "test_a_model_evaluated_on_an_imported_trace_names_the_file")),
}
# fault -> the test that injects it and asserts the resumed job loses nothing
FAULTS = {
    "SIGTERM of a convergence run": "training/test_training.py::"
    "test_sigterm_checkpoints_and_the_same_command_resumes_to_identical_metrics",
    "a convergence run killed mid-run (every mode)": "training/test_asynchronous.py::"
    "test_resumed_run_of_a_mode_equals_uninterrupted_run",
    "SIGTERM of a model training": "test_bad_input_files.py::"
    "test_sigterm_stops_model_training_with_a_checkpoint_and_the_command_resumes",
    "a model training killed mid-run": "runtime_model/test_runtime_model.py::"
    "test_resume_from_checkpoint_equals_uninterrupted",
    "SIGKILL of a distributed job (server, workers, launcher)": "distributed/test_distributed.py::"
    "test_a_killed_job_resumes_from_the_servers_checkpoint",
    "SIGKILL of a distributed worker": "distributed/test_distributed.py::"
    "test_a_killed_worker_is_censored_and_training_goes_on",
    "Ctrl-C of a Snakemake run while a convergence run trains": "workflow/test_workflow.py::"
    "test_an_interrupted_dag_resumes_its_runs_instead_of_redoing_them",
}


def collected(modules: set[str]) -> Counter:
    """Test function -> how many cases pytest collects of it, in ``modules``."""
    done = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", "-m", "long or not long",  # make test-long's too
                           *(f"tests/{m}" for m in sorted(modules))],
                          cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return Counter(re.sub(r"\[.*", "", line).removeprefix("tests/")
                   for line in done.stdout.splitlines() if "::" in line)


def test_the_readme_counts_are_the_matrix():
    faults = {f.partition("::")[0] for f in FAULTS.values()}
    cases = collected({module for module, _ in CLASSES.values()} | faults)
    counts = {name: sum(cases[f"{module}::{test}"] for test in tests)
              for name, (module, tests) in CLASSES.items()}
    assert all(counts.values()), counts  # a renamed test would count 0
    assert all(cases[test] >= 1 for test in FAULTS.values()), FAULTS
    section = (REPO / "docs/reliability.md").read_text()
    for name, count in counts.items():
        assert f"| {name} | {count} |" in section, (name, count)
    assert f"| all bad inputs | {sum(counts.values())} |" in section
    for fault in FAULTS:
        assert f"| {fault} | 0 |" in section, fault
