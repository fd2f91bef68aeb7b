"""The reviewers' questions and the measured answer to each, written beside the figures.

``QUESTIONS`` is the one list of what the NeurIPS reviewers asked (R1-R3) and the project asks
itself ("project"), each with the figure or table of ``bdsgd.figures.FIGURES`` that answers it; the
README's table "What the reviewers asked" has a row per question. ``bdsgd figures`` computes
each answer from the tables it drew the figure from (the ``*_answer`` functions beside the
drawing code) and writes them twice: ``answers.rst``, a section per figure between the markers
of ``markers``, which the figure's report caption includes (docutils ``include`` with
``start-after`` and ``end-before``), and ``reviewers.csv``, a row per question, the report's
table of them (a wall-clock answer only in the caption: the table repeats byte for byte).
"""

from __future__ import annotations

import pandas as pd

# key -> (reviewer, question, the figure that answers it)
QUESTIONS = {
    "throughput_variance": ("R1", "Why does BDSGD's throughput vary more than Chen et al.'s?",
                            "throughput_over_time"),
    "throughput": ("R1, R2", "How close does each policy come to the hindsight optimum?",
                   "throughput"),
    "communication": ("R1", "What if communication is expensive, or the server sharded?",
                      "comm_sweep"),
    "censoring": ("R1", "Does imputing censored run-times bias the model, and does it matter "
                  "for the cutoffs?", "censoring"),
    "data_value": ("R1, R3", "Can the model adapt from censored data; does letting stragglers "
                   "finish (or exploring) help?", "data_value"),
    "cutoff_evolution": ("R2", "How does the cutoff evolve over time?", "cutoff_over_time"),
    "fixed_cutoff": ("R2", "Would a fixed cutoff, or deciding less often, do?", "period_sweep"),
    "decision_overhead": ("R2", "What does a decision cost against the gradient time, by n?",
                          "decision_overhead"),
    "idle_time": ("R3", "How much worker time is idle, and what do Chen et al.'s backup workers "
                  "save?", "worker_time"),
    "cutoff_in_training": ("R2", "Which cutoffs do the policies choose while training?",
                           "training_cutoff"),
    "time_to_accuracy": ("R1, R2", "Does a higher throughput reach the target accuracy sooner?",
                         "time_to_accuracy"),
    "objective": ("R2", "Does maximising the objective's gain instead of throughput pay?",
                  "ablations"),
    "lr_scaling": ("R3", "Does linear learning-rate scaling with the cutoff help?", "ablations"),
    "empirical_cdf": ("R2", "How would a naive empirical CDF of the run-times do?",
                      "throughput"),
    "bandit": ("R3", "Would a simple bandit or regression model achieve most of the gains?",
               "throughput"),
    "emission": ("R3", "A Gaussian for positive run-times?", "ladder"),
    "drift": ("R1", "If the cluster's load at test time differs from training's, is the model "
              "still as good?", "ladder"),
    "paper_ladder": ("project", "What does each change from the paper's BDSGD to bdsgd buy?",
                     "ladder"),
    "clock_fidelity": ("project", "Does the virtual clock reproduce a real distributed run?",
                       "distributed_replay"),
    "model_quality": ("project", "How good are the model's forecasts of the order statistics?",
                      "model_predictions"),
}
# The paired comparisons (policy, reference) that answer a question of their own, on the
# throughput replay: the naive empirical CDF, and the bandit and per-worker regressions.
VERSUS = {
    "empirical_cdf": [("bdsgd", "ecdf"), ("bdsgd-paper", "ecdf"), ("ecdf", "static")],
    "bandit": [("bdsgd", "bandit"), ("bdsgd", "ewma"), ("bdsgd", "persist"),
               ("bdsgd-paper", "bandit")],
}
COLUMNS = ["question", "reviewer", "asked", "figure", "answer"]
# Figures whose answer is wall-clock time (a decision's, a real job's), which changes from run to
# run: answers.rst (the caption) states it; reviewers.csv, a table that repeats byte for byte,
# points to it.
WALL_CLOCK = ("decision_overhead", "distributed_replay")


def markers(figure: str) -> tuple[str, str]:
    """The lines around ``figure``'s section of answers.rst (rst comments: they render as
    nothing); a caption includes what lies between."""
    return f".. answer {figure} --", f".. end {figure} --"


def answers_rst(answers: dict[str, str]) -> str:
    """answers.rst: a section per figure of ``answers`` (figure -> its measured answer)."""
    lines = []
    for figure, text in answers.items():
        start, end = markers(figure)
        lines += [start, "", text, "", end, ""]
    return "\n".join(lines)


def reviewers_table(answers: dict[str, str]) -> pd.DataFrame:
    """reviewers.csv: a row per question, with its own measured answer if it has one (a key of
    ``VERSUS``, ``emission``, ``drift``), else its figure's (or 'not measured in this run' where the
    figure has none; a pointer to the caption for a WALL_CLOCK one)."""
    def answer(key: str, figure: str) -> str:
        if figure in WALL_CLOCK and figure in answers:
            return f"wall-clock, measured anew each run: in the {figure} figure's caption"
        return answers.get(key) or answers.get(figure) or "not measured in this run"

    rows = [{"question": key, "reviewer": who, "asked": asked, "figure": figure,
             "answer": answer(key, figure)} for key, (who, asked, figure) in QUESTIONS.items()]
    return pd.DataFrame(rows, columns=COLUMNS)
