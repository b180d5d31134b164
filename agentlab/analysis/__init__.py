"""Pure analysis of LLM traffic: DataFrames in, DataFrames and plotly figures out.

No Ray, no LLM, no IO: every function takes the ``llm_calls`` / ``messages`` / metrics
DataFrames of a run (or of many runs) and returns a new DataFrame or a figure. plotly is
imported only inside the figure functions.
"""

from agentlab.analysis._frame import DEFAULT_EPS, DEFAULT_ZEROS, positive_values
from agentlab.analysis.calibrate_check import RERUN_METRICS, rerun_comparison_df, rerun_figure
from agentlab.analysis.figures import (
    STAGES,
    iat_cdf_figure,
    iat_histogram_figure,
    inflight_figure,
    paper_iat_figure,
    paper_lengths_figure,
    stage_latency_figure,
)
from agentlab.analysis.fits import (
    DEFAULT_DISTS,
    FAMILIES,
    fit_iat,
    fit_params,
    fit_sample,
    fits_df,
    frozen_dist,
    ks_exact,
)
from agentlab.analysis.gof import bootstrap_ks_df, subsample_ks_df, vuong_df, vuong_test
from agentlab.analysis.iat import (
    DEFAULT_BY,
    DEFAULT_STAGE,
    DEFAULT_THRESHOLD,
    burst_sizes_df,
    burst_summary_df,
    call_rate_df,
    iat_df,
    log_histogram_df,
    on_off_df,
)
from agentlab.analysis.inflight import inflight_summary_df, inflight_timeline_df, sweep_inflight
from agentlab.analysis.layers import BACKEND_METRICS, backend_summary_df, process_summary_df
from agentlab.analysis.metrics import latency_df, message_bytes_df, tokens_per_run_df
from agentlab.analysis.mixture import LogMixture, fit_log_mixture, mixture_df
from agentlab.analysis.paper import (
    PAPER_ANCHORS,
    PAPER_FENCE,
    PAPER_FIT_DISTS,
    PAPER_GOAL_METRICS,
    PAPER_ROLES,
    PAPER_WINDOW,
    paper_comparison_df,
    paper_fit_comparison_df,
    paper_fit_samples,
    paper_fits_df,
    paper_peaks,
    paper_summary_df,
    published_paper_df,
)
from agentlab.analysis.paper_iat import paper_iat_histogram_df, published_iat_histogram_df
from agentlab.analysis.paper_lengths import paper_lengths_df, published_lengths_df
from agentlab.analysis.report import (
    best_fits_df,
    conclusions_markdown,
    format_seconds,
    sweep_summary_figure,
    topology_conclusions,
)
from agentlab.analysis.summary import traffic_summary_df

__all__ = [
    "BACKEND_METRICS",
    "DEFAULT_BY",
    "DEFAULT_DISTS",
    "DEFAULT_EPS",
    "DEFAULT_STAGE",
    "DEFAULT_THRESHOLD",
    "DEFAULT_ZEROS",
    "FAMILIES",
    "PAPER_ANCHORS",
    "PAPER_FENCE",
    "PAPER_FIT_DISTS",
    "PAPER_GOAL_METRICS",
    "PAPER_ROLES",
    "PAPER_WINDOW",
    "RERUN_METRICS",
    "STAGES",
    "LogMixture",
    "backend_summary_df",
    "best_fits_df",
    "bootstrap_ks_df",
    "burst_sizes_df",
    "burst_summary_df",
    "call_rate_df",
    "conclusions_markdown",
    "fit_iat",
    "fit_log_mixture",
    "fit_params",
    "fit_sample",
    "fits_df",
    "format_seconds",
    "frozen_dist",
    "iat_cdf_figure",
    "iat_df",
    "iat_histogram_figure",
    "inflight_figure",
    "inflight_summary_df",
    "inflight_timeline_df",
    "ks_exact",
    "latency_df",
    "log_histogram_df",
    "message_bytes_df",
    "mixture_df",
    "on_off_df",
    "paper_comparison_df",
    "paper_fit_comparison_df",
    "paper_fit_samples",
    "paper_fits_df",
    "paper_iat_figure",
    "paper_iat_histogram_df",
    "paper_lengths_df",
    "paper_lengths_figure",
    "paper_peaks",
    "paper_summary_df",
    "positive_values",
    "process_summary_df",
    "published_iat_histogram_df",
    "published_lengths_df",
    "published_paper_df",
    "rerun_comparison_df",
    "rerun_figure",
    "stage_latency_figure",
    "subsample_ks_df",
    "sweep_inflight",
    "sweep_summary_figure",
    "tokens_per_run_df",
    "topology_conclusions",
    "traffic_summary_df",
    "vuong_df",
    "vuong_test",
]
