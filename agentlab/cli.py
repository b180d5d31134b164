"""agentlab: simulate societies of LLM agents and measure the LLM traffic they generate."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import warnings
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["COMMANDS", "main"]

EXAMPLES = """\
examples:
  agentlab demo --agents 50 --ticks 3          a society on the simulated backend
  agentlab run society.toml --resume --ticks 2 two more ticks of a configured society
  agentlab run --fork runs/demo@3 --out runs/b  a new run from tick 3 of another
  agentlab experiment --out runs/topo --runs 200  the topology traffic study (virtual clock)
  agentlab report runs/demo --html report.html summary and figures of one run
  agentlab report runs/                        a table of every run under runs/
  agentlab runs runs/                          list runs with their key figures
  agentlab view runs/                          browse them in a local web page
  agentlab view runs/ --bundle site/           the same pages as a static site
  agentlab sweep notebooks/02_topology_traffic.ipynb -p agents=3,4 \\
      -p 'topologies=["star"],["sequential"]' --out runs/sweep
  agentlab paper notebooks/01_quickstart.ipynb -p ticks=2 --out runs/paper

Run `agentlab COMMAND --help` for a command's options."""


class _Formatter(argparse.HelpFormatter):
    """Wraps prose but keeps indented lines (the examples) as written, and appends an
    option's default to its help unless the help already states it."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        import textwrap

        out = []
        for para in text.split("\n"):
            if para.startswith(" ") or not para:
                out.append(indent + para)
            else:
                out.append(textwrap.fill(para, width, initial_indent=indent,
                                         subsequent_indent=indent))  # fmt: skip
        return "\n".join(out)

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        d = action.default
        if (
            "default" in text
            or action.required
            or d in (None, False, [], argparse.SUPPRESS)
            or not action.option_strings
        ):
            return text
        return f"{text} (default: {d})"


def _profiles() -> str:
    # sim_profiles is plain data (no litellm): cheap enough for --help
    from agentlab.llm.sim_profiles import PROFILES

    return ", ".join(f"sim/{p}" for p in PROFILES)


def _command(sub: argparse._SubParsersAction, name: str, **kwargs: Any) -> argparse.ArgumentParser:
    """A subcommand's parser in the shape they all share: our help formatter and no
    abbreviated options (``--agent 5`` must not be read as ``--agents 5``)."""
    return sub.add_parser(name, formatter_class=_Formatter, allow_abbrev=False, **kwargs)


def _add_demo(sub: argparse._SubParsersAction) -> None:
    d = _command(
        sub,
        "demo",
        help="run the demo society on the simulated backend",
        description="Run a persona society on the social feed with the sim/vllm-3b profile.",
    )
    d.add_argument(
        "--out",
        default=None,
        help="run directory (default: a new runs/demo-<n>; an existing run is refused "
        "unless --overwrite)",
    )
    d.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run in --out (refused while another process writes it)",
    )
    d.add_argument("--agents", type=int, default=200, help="persona agents")
    d.add_argument("--ticks", type=int, default=5, help="ticks to run")
    d.add_argument("--seed", type=int, default=0, help="root seed")
    d.set_defaults(target="agentlab.demo:main")


def _add_run(sub: argparse._SubParsersAction) -> None:
    r = _command(
        sub,
        "run",
        help="run a society from a TOML/YAML config",
        description="Create (or resume) a society from a config file of Society.create "
        f"arguments and run it. Simulated models: {_profiles()}; any litellm model string "
        "works with a real clock.",
    )
    r.add_argument("config", nargs="?", help="TOML or YAML config file (optional with --fork)")
    r.add_argument("--resume", action="store_true", help="continue from the last committed tick")
    r.add_argument(
        "--fork",
        default=None,
        metavar="RUN@TICK",
        help="start from committed tick TICK of run RUN (config: only the changes)",
    )
    r.add_argument(
        "--executor",
        choices=["local", "ray"],
        default=None,
        help="where agents run (default: the config's)",
    )
    r.add_argument(
        "--batch-size", type=int, default=None, help="agents per batch (default: the config's)"
    )
    how = r.add_mutually_exclusive_group()
    how.add_argument(
        "--ticks", type=int, default=None, metavar="N",
        help="run N more ticks (default: the config's ticks, or until)",
    )  # fmt: skip
    how.add_argument("--until", type=int, default=None, metavar="T", help="run up to tick T")
    r.add_argument("--out", default=None, help="run directory (default: the config's out)")
    r.set_defaults(target="agentlab.runtime.cli_run:main")


def _add_sim_serve(sub: argparse._SubParsersAction) -> None:
    s = _command(
        sub,
        "sim-serve",
        help="OpenAI-compatible HTTP server over the simulator",
    )
    s.add_argument("--profile", default="vllm-3b", help=f"simulator profile ({_profiles()})")
    s.add_argument("--host", default="127.0.0.1", help="address to bind")
    s.add_argument("--port", type=int, default=8600, help="port to bind")
    s.add_argument("--seed", type=int, default=0, help="simulator seed")
    from agentlab.llm.sim_serve_args import add_fault_arguments

    add_fault_arguments(s)
    s.set_defaults(target="agentlab.llm.sim_serve:main")


def _add_replay_traffic(sub: argparse._SubParsersAction) -> None:
    rt = _command(
        sub,
        "replay-traffic",
        help="fire a run's LLM traffic at an OpenAI-compatible endpoint (a new run)",
    )
    rt.add_argument("run", help="run directory (or a trace.jsonl from --export)")
    rt.add_argument("--base-url", default=None, help="e.g. http://127.0.0.1:8600/v1")
    rt.add_argument("--out", default=None, help="directory of the new run")
    rt.add_argument("--model", default="openai/default", help="litellm model string to send")
    rt.add_argument("--mode", choices=["open", "closed"], default="open",
                    help="open: original arrival times; closed: call dependencies")  # fmt: skip
    rt.add_argument("--speed", type=float, default=1.0, help="time compression factor")
    rt.add_argument("--timeout", type=float, default=120.0, help="seconds per call")
    rt.add_argument("--export", default=None, metavar="DIR",
                    help="write trace.jsonl, sharegpt.json (vllm bench serve --dataset-name "
                    "sharegpt: output lengths kept), vllm_custom.jsonl (output lengths lost: "
                    "vLLM reads only prompt), guidellm.jsonl, mooncake_trace.jsonl (aiperf), "
                    "guidellm_trace.jsonl into DIR")  # fmt: skip
    rt.set_defaults(target="agentlab.analysis.traffic:main")


def _add_export_otlp(sub: argparse._SubParsersAction) -> None:
    eo = _command(
        sub,
        "export-otlp",
        help="write a run's spans as OTLP (JSON or protobuf) or push them to a collector",
    )
    eo.add_argument("run", help="run directory")
    eo.add_argument("--out", default=None, metavar="FILE", help="write an OTLP file")
    eo.add_argument("--format", default=None, choices=("json", "protobuf"),
                    help="file format (default: protobuf for .pb/.bin, else json)")  # fmt: skip
    eo.add_argument("--endpoint", default=None, metavar="URL",
                    help="push to an OTLP/HTTP receiver, e.g. http://127.0.0.1:6006 "
                    "(/v1/traces appended unless given)")  # fmt: skip
    eo.add_argument("--follow", action="store_true",
                    help="with --endpoint: push each tick's spans as it commits, until the "
                    "run stops running (agentlab.store.otlp_live)")  # fmt: skip
    eo.set_defaults(target="agentlab.store.otlp_cli:main")


def _add_report(sub: argparse._SubParsersAction) -> None:
    rep = _command(
        sub,
        "report",
        help="summarise a run, a sweep, or a folder of runs",
        description="PATH is a run directory (summary and figures), a sweep directory "
        "(one row per point, compared), or a folder holding runs (one row per run). "
        "Anything else is an error.",
    )
    rep.add_argument("path", help="run, sweep or folder of runs")
    rep.add_argument(
        "--html", default=None, help="also write an HTML page (plotly.min.js goes next to it)"
    )
    rep.add_argument(
        "--self-contained",
        action="store_true",
        help="with --html: plotly.js inside the page (works copied alone; ~4.7 MB)",
    )
    rep.set_defaults(target="agentlab.cli:report")


def _add_runs(sub: argparse._SubParsersAction) -> None:
    ru = _command(
        sub,
        "runs",
        help="list the runs under a folder with their key figures",
    )
    ru.add_argument("folder", nargs="?", default="runs", help="folder to search (3 levels)")
    ru.add_argument("--all", action="store_true",
                    help="also list the runs inside sweeps and papers")  # fmt: skip
    ru.set_defaults(target="agentlab.cli:runs")


def _add_view(sub: argparse._SubParsersAction) -> None:
    v = _command(
        sub,
        "view",
        help="browse the runs, experiments, sweeps and papers under a folder in a web page",
        description="Serve a local page listing every run, sweep and paper under DIR (search, "
        "sort, filter by kind, status, parameter and date); open one for its errors (with "
        "tracebacks), LLM calls (prompts and replies when recorded: AGENTLAB_LLM_IO=1), "
        "messages, spans, per-agent timelines and charts; an experiment by topology and run "
        "(call graph); a sweep's metrics against its parameters. Open pages follow running "
        "runs. --bundle writes the same pages as a static site instead.",
    )
    v.add_argument("dir", nargs="?", default="runs", help="folder to browse")
    v.add_argument("--bundle", default=None, metavar="OUT", help="write a static site to OUT")
    v.add_argument("--host", default="127.0.0.1", help="address to bind")
    v.add_argument("--port", type=int, default=8700, help="port to bind (0: any free port)")
    v.set_defaults(target="agentlab.view:main")


def _add_params(p: argparse.ArgumentParser, metavar: str, multi: bool) -> None:
    what = (
        'grid values, YAML: agents=3,4 or agents=[3,4]; topologies=\'["a","b"],["c"]\' '
        "is two values (repeatable)"
        if multi
        else "a notebook parameter, value parsed as YAML: ticks=3, topologies=[a,b] (repeatable)"
    )
    p.add_argument("-p", "--param", action="append", default=[], metavar=metavar, help=what)
    p.add_argument(
        "--params",
        default=None,
        metavar="FILE",
        help="YAML file of name: value" + (" (a list is the grid values)" if multi else ""),
    )


def _add_sweep(sub: argparse._SubParsersAction) -> None:
    sw = _command(
        sub,
        "sweep",
        help="run a notebook over a parameter grid",
        description="Execute NOTEBOOK once per point of the grid (cartesian product of the "
        "-p values) with papermill; each point is a complete run directory under --out. "
        "Parameters the notebook's parameters cell lacks are an error.",
    )
    sw.add_argument("notebook", help="notebook with a cell tagged 'parameters'")
    _add_params(sw, "NAME=VALUES", multi=True)
    sw.add_argument("--out", required=True, help="sweep directory")
    sw.add_argument(
        "--executor", choices=["local", "ray"], default="local", help="where points run"
    )
    sw.add_argument(
        "--max-parallel", type=int, default=None, help="points at once (default: the CPU count)"
    )
    sw.add_argument(
        "--timeout", type=float, default=None, help="seconds per point (default: no limit)"
    )
    sw.add_argument("--resume", action="store_true", help="keep points that finished ok")
    sw.set_defaults(target="agentlab.sweep.cli:main")


def _add_paper(sub: argparse._SubParsersAction) -> None:
    pa = _command(
        sub,
        "paper",
        help="execute a notebook fresh and export it to HTML that opens offline",
        description="Execute NOTEBOOK into --out and write NOTEBOOK.html next to its "
        "manifest; widgets show their final state, figures use one shared plotly.min.js, "
        "nothing loads from the network.",
    )
    pa.add_argument("notebook", help="notebook to execute")
    pa.add_argument("--out", required=True, help="output directory")
    _add_params(pa, "NAME=VALUE", multi=False)
    pa.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="seconds for the whole notebook (default: no limit)",
    )
    pa.add_argument(
        "--no-execute",
        action="store_true",
        help="export NOTEBOOK as saved (e.g. from JupyterLab), not run: its outputs, widgets "
        "as their static snapshots, offline (plain nbconvert of a saved notebook draws "
        "widgets with a widget manager from a CDN)",
    )
    pa.set_defaults(target="agentlab.sweep.paper:main")


def _add_calibrate(sub: argparse._SubParsersAction) -> None:
    ca = _command(
        sub,
        "calibrate",
        help="fit a sim profile (TOML) from a run's llm_calls",
    )
    ca.add_argument("run", help="run directory")
    ca.add_argument("--out", required=True, help="profile TOML to write")
    ca.add_argument("--name", default=None, help="profile name (default: the file's stem)")
    ca.add_argument("--slots", type=int, default=None, help="server max_num_seqs (default: fitted)")
    ca.add_argument(
        "--max-num-batched-tokens", type=int, default=0, help="server token budget per step"
    )
    ca.add_argument(
        "--by", default=None, help="column separating independent servers (default: one server)"
    )
    ca.add_argument(
        "--client", default=None, help="column of closed-loop clients (replay) (default: none)"
    )
    ca.add_argument(
        "--by-label",
        default=None,
        help="fit output lengths per these labels, e.g. call,round or call,round,task_category"
        " (default: per stage)",
    )
    ca.add_argument("--step-roofline", action=argparse.BooleanOptionalAction, default=None,
                    help="fit the roofline step (max of weight read and compute), as sim/vllm-3b"
                    " (default: the run's sim/ profile's, else off)")  # fmt: skip
    ca.add_argument("--attention", action="store_true",
                    help="also fit attention_decode_s (decode slowing with the context)")  # fmt: skip
    ca.add_argument("--length-corr-by", default=None,
                    help="with --by-label, also fit length_corr: how a group's lengths (e.g."
                    " run_id) run long or short together")  # fmt: skip
    ca.add_argument("--tokenizer", default=None,
                    help="the tokenizer that counted the run's prompt tokens: llama3 or"
                    " chars:<characters per token> (default: the run's sim/ profile's)")  # fmt: skip
    ca.set_defaults(target="agentlab.analysis.calibrate:main")


def _add_export_dirs(sub: argparse._SubParsersAction) -> None:
    ex = _command(
        sub,
        "export-dirs",
        help="write a packed run's agents as directories",
    )
    ex.add_argument("run", help="run directory holding agents.sqlite")
    ex.add_argument("out", help="empty folder for <out>/<agent_id>/<key> files")
    ex.set_defaults(target="agentlab.store.packed_store:main")


def _add_export(sub: argparse._SubParsersAction) -> None:
    ex = _command(
        sub,
        "export",
        help="write a run's datasets as Parquet files (read with pandas/pyarrow/duckdb)",
        description="One <DIR>/<dataset>.parquet per dataset (spans included), as Run.df "
        "returns it: no _shard/_seq, *_at UTC timestamps next to the epoch seconds, JSON "
        "columns as JSON text.",
    )
    ex.add_argument("run", help="run directory")
    ex.add_argument("--parquet", required=True, metavar="DIR", help="folder for the files")
    ex.add_argument("--dataset", action="append", default=None,
                    help="only this dataset (repeatable; default: all)")  # fmt: skip
    ex.set_defaults(target="agentlab.cli:export")


def _add_experiment(sub: argparse._SubParsersAction) -> None:
    from agentlab.experiment_cli import add_arguments  # (argparse only: --help stays fast)

    e = _command(sub, "experiment", help="run a coordination-topology traffic experiment",
                 description="Run the AgentVerse workflow under each coordination topology "
                 "(topology.Experiment) and print its traffic per topology. Ctrl-C stops "
                 "it (the run in flight is dropped); --resume runs the rest.")  # fmt: skip
    add_arguments(e, _profiles())
    e.set_defaults(target="agentlab.experiment_cli:main")


#: one function per subcommand, in help order; add yours here (set ``target`` to
#: ``"module:function"``, imported only when the command runs)
COMMANDS: list[Callable[[argparse._SubParsersAction], None]] = [
    _add_demo,
    _add_run,
    _add_experiment,
    _add_report,
    _add_runs,
    _add_view,
    _add_sweep,
    _add_paper,
    _add_calibrate,
    _add_sim_serve,
    _add_replay_traffic,
    _add_export_otlp,
    _add_export_dirs,
    _add_export,
]


def _version() -> str:
    from agentlab import __version__

    return f"agentlab {__version__}"


def build_parser() -> argparse.ArgumentParser:
    """The ``agentlab`` argument parser (every subcommand in :data:`COMMANDS`)."""
    # allow_abbrev=False everywhere: `--agent 5` must not be read as `--agents 5`
    p = argparse.ArgumentParser(
        prog="agentlab",
        description=__doc__,
        epilog=EXAMPLES,
        formatter_class=_Formatter,
        allow_abbrev=False,
    )
    p.add_argument("--version", action="version", version=_version())
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for add in COMMANDS:
        add(sub)
    return p


def report(args: argparse.Namespace) -> int:
    """``agentlab report PATH``: a run, a sweep (points compared) or a folder of runs."""
    from pathlib import Path

    from agentlab.analysis import run_report as rr
    from agentlab.analysis.report_figures import require_plotly
    from agentlab.errors import ConfigError

    path = Path(args.path)
    if not path.is_dir():
        raise ConfigError(f"{str(path)!r} is not a directory (give a run, sweep or folder)")
    if (path / "sweep.json").is_file():
        from agentlab.core.text_table import format_table
        from agentlab.store import summarize_run
        from agentlab.sweep import Sweep

        s = Sweep(path)
        table = s.table()
        life = summarize_run(path)
        print(f"sweep {path}: {len(table)} points of {s.meta.get('notebook')}")
        print(f"status     {life.status}" + (f"  ({life.error})" if life.error else ""))
        print(f"errors     {life.errors.describe()}  (over {len(life.children)} runs)")
        print(format_table(table))
        if args.html:
            out = rr.write_table_report(
                table, args.html, title=f"sweep {path.name}", subtitle=str(s.meta.get("notebook"))
            )
            print(f"html       {out}")
        return 0
    if (path / "run.json").is_file() or (path / "replay").is_dir():
        if args.html:
            require_plotly()  # before the summary: fail early, with the install command
        summary = rr.summarize_run(path)
        rr.print_summary(summary)
        if args.html:
            from agentlab.store import open_run

            run = open_run(path)
            try:
                out = rr.write_html_report(
                    run, summary, args.html, self_contained=args.self_contained
                )
            finally:
                run.close()
            print(f"html       {out}")
        return 0
    df = rr.runs_df(path, progress=sys.stderr.isatty())
    if not len(df):
        raise ConfigError(
            f"{str(path)!r} holds no run (run.json), sweep (sweep.json) or runs below it"
        )
    from agentlab.core.text_table import format_table

    print(format_table(df))
    if args.html:
        print(f"html       {rr.write_table_report(df, args.html, title=f'runs in {path}')}")
    return 0


def export(args: argparse.Namespace) -> int:
    """``agentlab export RUN --parquet DIR``: one Parquet file per dataset."""
    from agentlab.store import open_run

    with open_run(args.run) as run:
        files = run.export_parquet(args.parquet, args.dataset)
        for name, path in files.items():
            (n,) = run.con.execute("SELECT count(*) FROM read_parquet(?)", [str(path)]).fetchone()
            print(f"{name:<16} {n:>8} rows  {path}")
    return 0


def runs(args: argparse.Namespace) -> int:
    """``agentlab runs DIR``: one line per run with its key figures (the rows of
    ``agentlab view``'s runs list, so the two never disagree)."""
    from agentlab.view import format_runs, runs_rows

    rows = runs_rows(args.folder)
    if not rows:
        print(f"no runs under {args.folder}")
        return 0
    # a sweep's or paper's own runs: its row sums them (two papers made 62 rows of 64)
    inner = 0 if args.all else sum(bool(r.get("parent")) for r in rows)
    print(format_runs([r for r in rows if not r.get("parent")] if inner else rows))
    if inner:
        runs_word = "run" if inner == 1 else "runs"
        print(f"{inner} {runs_word} inside sweeps and papers not listed (--all lists them)")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``agentlab`` script; returns the process exit code."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.setdefault("LITELLM_OFFLINE_MODE", "true")
    args = build_parser().parse_args(argv)
    module, func = args.target.split(":")

    # a warning on a terminal is one line saying what happened, not Python's
    # "file.py:115: UserWarning: ..." followed by the source line that raised it
    python_format = warnings.formatwarning
    warnings.formatwarning = lambda message, *_a, **_k: (
        f"agentlab {args.command}: warning: {message}\n"
    )
    try:
        return _run_command(args, module, func)
    finally:
        warnings.formatwarning = python_format  # (main() may run inside a test session)


def _run_command(args: argparse.Namespace, module: str, func: str) -> int:
    """Run the command's function; its errors become one line and an exit code."""
    from agentlab.errors import AgentlabError

    try:
        result = getattr(importlib.import_module(module), func)(args)
        sys.stdout.flush()  # (a closed pipe shows here, not at the interpreter's exit)
    except AgentlabError as exc:
        print(f"agentlab {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:  # an extra this command needs is not installed
        from agentlab.errors import MissingExtraError

        missing = MissingExtraError.from_import(exc, f"agentlab {args.command}")
        if missing is None:
            raise
        print(f"agentlab {args.command}: error: {missing}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"agentlab {args.command}: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (`agentlab runs DIR | head`): stop quietly, as a Unix tool
        # does; stdout goes to devnull so the interpreter's own flush at exit cannot fail
        # again (the Python docs' recipe for SIGPIPE)
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, what a shell reports for a tool killed by it
    return int(result or 0)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
