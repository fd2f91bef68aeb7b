"""Pictures of a trace: run-time distributions, the iteration x worker heat map, CoV over time.

``draw_trace_figures(trace, name, out_dir)`` writes three figures, each as PNG and PDF
(``bdsgd.plotting.save_figure``, atomically; the PNGs named here):

- ``<name>_runtime_cdf.png``: the empirical CDF of all run-times (thick) and of each worker (thin;
  at most ``MAX_WORKER_LINES`` of them, evenly spaced), and beside it the survival function
  P(X > x) on log-log axes, where heavy tails and stragglers show.
- ``<name>_heatmap.png``: run-time of every worker (rows) at every iteration (columns), on a log
  colour scale from the 0.5th to the 99.9th percentile; run-times beyond it are clipped visibly
  (the colour bar's arrows, the run-times above it in a colour of their own, the true extremes
  written on the bar); censored run-times (lower bounds) in grey.
- ``<name>_cov.png``: the coefficient of variation across workers per iteration and its rolling
  median, over the real Alibaba PAI jobs' per-iteration CoV (interquartile band and median).
"""

from __future__ import annotations

from pathlib import Path

from bdsgd.plotting import DPI, figure_note, save_figure, unit_label, use_agg

use_agg()
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.colors import LogNorm  # noqa: E402
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter  # noqa: E402

from bdsgd.traces import TRACE_FIGURES  # noqa: E402
from bdsgd.traces.describe import iteration_cov  # noqa: E402
from bdsgd.traces.schema import Trace  # noqa: E402

MAX_WORKER_LINES = 64
# The colour bar's arrows, as a fraction of its length, drawn beyond the ends of its axes.
ARROW = 0.05
# Per-iteration CoV pooled over the 100 real Alibaba PAI jobs of
# tests/data/alibaba_pai_coefficient_variation.csv (82,739 iterations; a test recomputes them).
PAI_COV_QUANTILES = {0.1: 0.0319, 0.25: 0.0508, 0.5: 0.0935, 0.75: 0.5497, 0.9: 1.065}


def _unit(trace: Trace) -> str:
    """The trace's run-time unit (its metadata's; seconds without one), as an axis names it."""
    return unit_label(str(trace.meta.get("time_unit", "s")))


def _ecdf(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    x = np.sort(values)
    return x, np.arange(1, len(x) + 1) / len(x)


def _plain_log_ticks(axis, lo: float, hi: float) -> None:
    """Plain numbers (0.05, 400) on a log axis, with enough labelled minor ticks that a narrow
    range still shows several values and a wide one stays readable."""
    plain = FuncFormatter(lambda v, _: f"{v:g}")
    span = hi / lo
    axis.set_major_formatter(plain)
    axis.set_minor_locator(LogLocator(subs=(2, 4, 6, 8) if span < 30 else (2, 5)))
    axis.set_minor_formatter(plain if span < 1000 else NullFormatter())


def _runtime_cdf(trace: Trace, name: str, path: Path) -> list[Path]:
    x = trace.runtimes
    unit = _unit(trace)
    shown = np.unique(np.linspace(0, trace.n_workers - 1, MAX_WORKER_LINES).round().astype(int))
    fig, (ax_cdf, ax_tail) = plt.subplots(1, 2, figsize=(11, 4.2), layout="constrained")
    palette = plt.get_cmap("viridis")(np.linspace(0.15, 0.85, len(shown)))
    for color, i in zip(palette, shown, strict=True):
        for ax in (ax_cdf, ax_tail):
            xs, F = _ecdf(x[:, i])
            ax.step(xs, F if ax is ax_cdf else 1 - F + 1 / len(F), where="post", color=color,
                    lw=0.8, alpha=0.5)
    xs, F = _ecdf(x.ravel())
    ax_cdf.step(xs, F, where="post", color="black", lw=2.2, label="all workers")
    ax_tail.step(xs, 1 - F + 1 / len(F), where="post", color="black", lw=2.2, label="all workers")
    worker_label = (f"each worker ({len(shown)} of {trace.n_workers} shown)"
                    if len(shown) < trace.n_workers else "each worker")
    for ax in (ax_cdf, ax_tail):
        ax.plot([], [], color=palette[len(shown) // 2], lw=0.8, label=worker_label)
        ax.set_xlabel(f"run-time per iteration ({unit})")
        ax.legend(loc="lower right" if ax is ax_cdf else "lower left", frameon=True)
    lo, hi = np.percentile(x, [0.1, 99.9])
    pad = 0.05 * (hi - lo) or 0.05 * hi  # a constant trace still gets a visible range
    ax_cdf.set_xlim(lo - pad, hi + pad)
    ax_cdf.set_ylabel("fraction of run-times ≤ x (ECDF)")
    ax_cdf.set_title("Empirical CDF (central 99.8%)")
    # Log run-time axis only where run-times span a decade; a narrow range reads better linear.
    wide = xs[-1] / xs[0] > 10
    if wide:
        ax_tail.set_xscale("log")
        _plain_log_ticks(ax_tail.xaxis, xs[0], xs[-1])
    ax_tail.set_yscale("log")
    ax_tail.set_ylabel("fraction of run-times ≥ x (survival)")
    ax_tail.set_title(f"Tail: all run-times ({'log-log' if wide else 'log y'})")
    fig.suptitle(f"{name}: run-time distribution ({trace.n_iterations} iterations x "
                 f"{trace.n_workers} workers, source {trace.meta.get('source', '?')})")
    return save_figure(fig, path)


CLIP_PERCENTILES = (0.5, 99.9)  # the heat map's colour range: a few extremes do not wash it out
OVER_COLOUR = "#56B4E9"  # run-times above the colour range: sky blue, in no part of magma


def heatmap_range(x: np.ndarray) -> tuple[float, float, str]:
    """(low, high, extend) of the heat map's colour scale: the CLIP_PERCENTILES of the run-times
    and which ends clip any ("neither", "min", "max", "both"; the colour bar's arrows)."""
    lo, hi = np.percentile(x, CLIP_PERCENTILES)
    hi = max(hi, lo * 1.01)  # a constant trace still gets a colour bar
    ends = (x.min() < lo, x.max() > hi)
    return float(lo), float(hi), {(False, False): "neither", (True, False): "min",
                                  (False, True): "max", (True, True): "both"}[ends]


def _heatmap(trace: Trace, name: str, path: Path) -> list[Path]:
    x = trace.runtimes
    unit = _unit(trace)
    lo, hi, extend = heatmap_range(x)
    shown = np.ma.masked_array(x.T, mask=trace.censored.T)
    cmap = plt.get_cmap("magma").with_extremes(bad="0.75", over=OVER_COLOUR)
    width = float(np.clip(4 + trace.n_iterations / 60, 8, 14))
    height = float(np.clip(2 + trace.n_workers / 8, 3, 7))
    fig, ax = plt.subplots(figsize=(width, height), layout="constrained")
    norm = LogNorm(vmin=lo, vmax=hi)
    # Sharp cells while each gets at least a pixel; a smoothing filter once cells are smaller
    # than pixels, so a lone straggler row cannot vanish between sampled pixels.
    fits = trace.n_iterations <= 0.8 * width * DPI and trace.n_workers <= 0.8 * height * DPI
    image = ax.imshow(shown, aspect="auto", cmap=cmap, norm=norm,
                      interpolation="nearest" if fits else "antialiased", origin="lower",
                      extent=(-0.5, trace.n_iterations - 0.5, -0.5, trace.n_workers - 0.5))
    bar = fig.colorbar(image, ax=ax, pad=0.01, extend=extend, extendfrac=ARROW)
    _plain_log_ticks(bar.ax.yaxis, lo, hi)
    bar.set_label(f"run-time ({unit})")
    clipped = {"max": f"blue above {hi:.4g} (max {x.max():.4g})",
               "min": f"black below {lo:.4g} (min {x.min():.4g})"}
    notes = [text for end, text in clipped.items() if extend in (end, "both")]
    if extend in ("max", "both"):  # the true maximum at the arrow's tip
        bar.ax.set_title(f"max\n{x.max():.4g}", fontsize=8, y=1 + ARROW)  # above the arrow
    ax.set_xlabel("iteration (index in trace)")
    ax.set_ylabel("worker (index)")
    ax.grid(False)
    censored = int(trace.censored.sum())
    note = f"; grey: {censored} censored" if censored else ""
    ax.set_title(f"{name}: run-time of each worker per iteration (log colour scale){note}"
                 + (f"\ncolours clipped at percentiles {CLIP_PERCENTILES[0]:g}-"
                    f"{CLIP_PERCENTILES[1]:g}: {', '.join(notes)}" if notes else ""), fontsize=10)
    return save_figure(fig, path)


def _cov(trace: Trace, name: str, path: Path) -> list[Path]:
    cov = iteration_cov(trace.runtimes)
    t = np.arange(trace.n_iterations)
    window = max(trace.n_iterations // 50, 5)
    padded = np.pad(cov, (window // 2, window - 1 - window // 2), mode="edge")
    rolling = np.median(np.lib.stride_tricks.sliding_window_view(padded, window), axis=1)
    fig, ax = plt.subplots(figsize=(10, 4.4), layout="constrained")
    q = PAI_COV_QUANTILES
    ax.axhspan(q[0.25], q[0.75], color="tab:orange", alpha=0.15,
               label="real PAI jobs: 25–75% of iterations")
    ax.axhline(q[0.5], color="tab:orange", ls="--", lw=1.2, label="real PAI jobs: median")
    ax.plot(t, cov, color="tab:blue", lw=0.6, alpha=0.45, label="this trace: per iteration")
    ax.plot(t, rolling, color="tab:blue", lw=2, label=f"this trace: rolling median ({window} it.)")
    ax.set_yscale("log")
    low, high = ax.get_ylim()
    _plain_log_ticks(ax.yaxis, low, high)
    ax.set_xlim(0, max(trace.n_iterations - 1, 1))
    ax.set_xlabel("iteration (index in trace)")
    ax.set_ylabel("CoV across workers (sd / mean)")
    ax.set_title(f"{name}: spread of run-times across workers over time")
    fig.legend(loc="outside lower center", ncols=4, fontsize="small", frameon=False)
    return save_figure(fig, path)


def draw_trace_figures(trace: Trace, name: str, out_dir: Path, note: str | None = None) -> list[Path]:
    """Write the three trace figures as ``out_dir/<name>_{runtime_cdf,heatmap,cov}.{png,pdf}``,
    each with ``note`` printed over it (``bdsgd.plotting.figure_note``; None: none); returns
    the files written, each figure's PNG then its PDF."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    # Seaborn's look through matplotlib's copy of its style: importing seaborn itself costs
    # seconds (scipy.stats) and adds nothing these figures use.
    def path(figure: str) -> Path:
        return out_dir / TRACE_FIGURES[figure][0].format(trace=name)

    with plt.style.context(["seaborn-v0_8-whitegrid", "seaborn-v0_8-notebook"]), figure_note(note):
        return [*_runtime_cdf(trace, name, path("cdf")), *_heatmap(trace, name, path("heatmap")),
                *_cov(trace, name, path("cov"))]
