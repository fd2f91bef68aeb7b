"""`snakemake --report` of the tiny DAG: every figure and summary table, with its caption, in a
category of its stage."""

from __future__ import annotations

import json
import re
import zipfile

import pytest

from bdsgd.figures import DRAW_FIGURES, FIGURES
from bdsgd.figures.answers import markers
from bdsgd.traces import TRACE_FIGURES
from tests.helpers import REPO, snakemake

CAPTIONS = REPO / "workflow/report"
# The report's categories in the order of the DAG's stages (it sorts them by name: numbered).
STAGES = ("Reviewer questions", "Traces", "Run-time model", "Policies", "Convergence", "Tables")


def test_every_caption_belongs_to_a_figure():
    named = {caption for _, caption, _ in [*FIGURES.values(), *DRAW_FIGURES.values(),
                                           *TRACE_FIGURES.values()]}
    assert named == {p.name for p in CAPTIONS.glob("*.rst")}


def report_entries(html: str, variable: str) -> dict:
    """One of the JSON tables the report's page holds in `var <variable> = {...};`."""
    return json.loads(re.search(rf"^\s*var {variable} = (\{{.*\}});$", html, re.MULTILINE)[1])


@pytest.mark.slow
def test_the_report_holds_every_figure_and_table_with_its_caption_by_stage(tiny_dag, tmp_path):
    workdir, config, cfg = tiny_dag
    proc = snakemake("--snakefile", str(REPO / "Snakefile"), "--directory", str(workdir),
                     "--configfile", str(config), "--cores", "1",
                     "--report", str(tmp_path / "report.zip"))
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    archive = zipfile.ZipFile(tmp_path / "report.zip")
    html = archive.read("report/report.html").decode()
    results = report_entries(html, "results")
    categories = report_entries(html, "categories")

    expected = {f"figures/tiny/{file}": category
                for file, _, category in [*FIGURES.values(), *DRAW_FIGURES.values()]}
    expected |= {f"figures/tiny/traces/{file.format(trace=trace)}": category
                 for file, _, category in TRACE_FIGURES.values() for trace in cfg["traces"]}
    assert set(results) == set(expected)
    assert {"summary.csv", "throughput_summary.csv"} <= {e["name"] for e in results.values()}
    for path, entry in results.items():
        assert entry["caption"].startswith("<p>"), path  # its caption's rst, rendered
        assert archive.read(f"report/{entry['data_uri']}") == (workdir / path).read_bytes(), path

    placed = {path: category for category, subcategories in categories.items()
              for paths in subcategories.values() for path in paths}
    numbered = {stage: f"{i}. {stage}" for i, stage in enumerate(STAGES, 1)}
    assert placed == {path: numbered[category] for path, category in expected.items()}
    assert set(categories["2. Traces"]) == {"all traces", *cfg["traces"]}
    # a caption states its figure's measured answer: answers.rst's section, included
    answers = (workdir / "figures/tiny/answers.rst").read_text()
    for figure in ("comm_sweep", "censoring", "time_to_accuracy"):
        start, end = markers(figure)
        measured = answers.split(start)[1].split(end)[0].split()
        caption = results[f"figures/tiny/{FIGURES[figure][0]}"]["caption"]
        assert " ".join(measured[:6]) in " ".join(re.sub("<[^>]+>", "", caption).split()), figure
