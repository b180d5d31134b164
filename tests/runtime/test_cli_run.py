"""``agentlab run`` (cli_run.main) with TOML and YAML configs, resume; the demo entry."""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path

import pytest

from agentlab.errors import ConfigError
from agentlab.runtime import Society
from agentlab.runtime.cli_run import load_config, main
from agentlab.store.atomic import read_json

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _args(config: Path, **kw: object) -> argparse.Namespace:
    base = {"config": str(config), "resume": False, "executor": None, "batch_size": None,
            "ticks": None, "until": None, "out": None}  # fmt: skip
    base.update(kw)
    return argparse.Namespace(**base)


def test_toml_run_then_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    cfg = tmp_path / "society.toml"
    cfg.write_text(
        f'out = "{out}"\nticks = 2\nseed = 4\nllm = "sim/instant"\nprogress = false\n'
        'env = ["social_feed"]\n[agents]\ncounter = 3\nllm = 2\n'
    )
    assert main(_args(cfg, batch_size=2)) == 0
    assert Society.open(out, progress=False).tick == 2
    assert "tick 2" in capsys.readouterr().out
    assert main(_args(cfg, resume=True, until=3)) == 0  # up to tick 3
    s = Society.open(out, progress=False)
    assert s.tick == 3 and len(s.agent_ids) == 5
    s.close()
    assert main(_args(cfg, resume=True, ticks=2)) == 0  # 2 more, like Society.run(ticks=2)
    s = Society.open(out, progress=False)
    assert s.tick == 5
    s.close()
    assert main(_args(cfg, resume=True)) == 0  # the config's ticks = 2: two more
    assert Society.open(out, progress=False).tick == 7
    with pytest.raises(ConfigError, match="give one"):
        main(_args(cfg, resume=True, ticks=1, until=9))
    # the same config run again without --resume: the flag that continues it, not the API
    with pytest.raises(ConfigError) as info:
        main(_args(cfg))
    assert f"agentlab run {cfg} --resume` continues it" in str(info.value)
    assert "Society.open" not in str(info.value)
    meta = json.loads((out / "SOCIETY.json").read_text())
    assert meta["batch_size"] == 2 and meta["env"][0]["type"] == "social_feed"


def test_yaml_config(tmp_path: Path) -> None:
    cfg = tmp_path / "s.yaml"
    cfg.write_text("ticks: 1\nagents: {counter: 2}\nprogress: false\n")
    assert main(_args(cfg, out=str(tmp_path / "y"))) == 0
    assert Society.open(tmp_path / "y", progress=False).tick == 1


def test_bad_configs_name_the_problem(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml")
    bad = tmp_path / "c.json"
    bad.write_text("{}")
    with pytest.raises(ConfigError, match=r"\.toml"):
        load_config(bad)
    unknown = tmp_path / "u.toml"
    unknown.write_text("agentz = 3\n")
    with pytest.raises(ConfigError, match="agentz"):
        load_config(unknown)
    noout = tmp_path / "n.toml"
    noout.write_text("ticks = 1\n")
    with pytest.raises(ConfigError, match="run directory"):
        main(_args(noout))


def test_demo_main_small(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from agentlab.demo import main as demo_main

    args = argparse.Namespace(out=str(tmp_path / "demo"), agents=12, ticks=1, seed=0)
    assert demo_main(args) == 0
    text = capsys.readouterr().out
    root = " --allow-root" if os.geteuid() == 0 else ""
    assert "agent-steps" in text and f"lab{root} notebooks/05_replay_analysis.ipynb" in text
    for line in ("status", "step errors", "tool errors", "LLM failures"):
        assert f"  {line}" in text
    assert "agentlab.open_run(" in text and "agentlab report" in text
    # numbers read as the report prints them ("tokens 1878247" beside its "1,878,247")
    tokens = re.search(r"LLM calls +[\d,]+ +tokens ([\d,]+)", text)
    assert tokens is not None and "," in tokens.group(1), text
    assert str((tmp_path / "demo").resolve()) in text
    s = Society.open(tmp_path / "demo", progress=False)
    assert s.tick == 1 and len(s.agent_ids) == 12


def test_cli_refuses_abbreviated_options(capsys: pytest.CaptureFixture[str]) -> None:
    from agentlab.cli import build_parser

    parser = build_parser()
    # `--agent 5` was read as `--agents 5` (argparse prefix matching): a 200-agent run
    # replaced by a 5-agent one
    for argv in (["demo", "--agent", "5"], ["demo", "--tick", "2"], ["run", "c.toml", "--tic", "3"],
                 ["view", "--port=1", "--bund", "x"], ["--vers"]):  # fmt: skip
        with pytest.raises(SystemExit) as exc:
            parser.parse_args(argv)
        assert exc.value.code == 2, argv
        err = capsys.readouterr().err
        assert "unrecognized arguments" in err or "required" in err, (argv, err)
    args = parser.parse_args(["demo", "--agents", "5", "--overwrite"])
    assert args.agents == 5 and args.overwrite and args.out is None


def test_demo_never_overwrites(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from agentlab.demo import main as demo_main

    monkeypatch.chdir(tmp_path)
    small = {"agents": 3, "ticks": 1, "seed": 0, "overwrite": False}
    assert demo_main(argparse.Namespace(out=None, **small)) == 0
    assert demo_main(argparse.Namespace(out=None, **small)) == 0
    # each call a new run: the first is untouched by the second
    assert (tmp_path / "runs" / "demo-1" / "SOCIETY.json").is_file()
    assert (tmp_path / "runs" / "demo-2" / "SOCIETY.json").is_file()
    first = (tmp_path / "runs" / "demo-1" / "SOCIETY_STEP.json").read_bytes()
    # an existing --out is refused without --overwrite, and left as it was
    with pytest.raises(ConfigError, match="--overwrite"):
        demo_main(argparse.Namespace(out="runs/demo-1", **{**small, "agents": 5}))
    assert (tmp_path / "runs" / "demo-1" / "SOCIETY_STEP.json").read_bytes() == first
    assert len(Society.open(tmp_path / "runs" / "demo-1", read_only=True).agent_ids) == 3
    # --overwrite replaces it
    assert demo_main(argparse.Namespace(out="runs/demo-1", **{**small, "overwrite": True,
                                                              "agents": 5})) == 0  # fmt: skip
    assert len(Society.open(tmp_path / "runs" / "demo-1", read_only=True).agent_ids) == 5
    assert re.search(r"status +done", capsys.readouterr().out)


def test_open_hints_fit_the_installation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import agentlab.demo as demo

    monkeypatch.setattr(demo.os, "geteuid", lambda: 0)
    lines = demo.open_hints(tmp_path)
    assert any("lab --allow-root" in line for line in lines)
    monkeypatch.setattr(demo.os, "geteuid", lambda: 1000)
    assert not any("--allow-root" in line for line in demo.open_hints(tmp_path))
    # installed elsewhere (a pip install into some prefix, run from another folder):
    # no ".venv/bin/..." path that only exists in a checkout
    prefix = tmp_path / "prefix" / "bin"
    prefix.mkdir(parents=True)
    (prefix / "jupyter").write_text("#!/bin/sh\n")
    (prefix / "jupyter").chmod(0o755)
    monkeypatch.setattr(demo.sys, "executable", str(prefix / "python"))
    elsewhere = tmp_path / "work"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    monkeypatch.setenv("PATH", f"{prefix}:/usr/bin:/bin")
    text = "\n".join(demo.open_hints(tmp_path))
    assert "  jupyter lab" in text and ".venv/bin" not in text
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # not on PATH: its full path
    assert f"{prefix / 'jupyter'} lab" in "\n".join(demo.open_hints(tmp_path))


def test_a_config_takes_every_society_create_argument(tmp_path: Path) -> None:
    import inspect

    from agentlab.runtime.config import SocietyConfig

    params = set(inspect.signature(Society.create).parameters) - {"cls", "path"}
    assert params <= set(SocietyConfig.model_fields), params - set(SocietyConfig.model_fields)
    out = tmp_path / "packed"
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'out = "{out}"\nticks = 1\nprogress = false\nstore = "packed"\nmax_error_share = 0.5\n'
        "[agents]\ncounter = 3\n"
    )
    assert main(_args(cfg)) == 0
    assert (out / "agents.sqlite").is_file()
    assert json.loads((out / "SOCIETY.json").read_text())["max_error_share"] == 0.5
    bad = tmp_path / "b.toml"
    bad.write_text('store = "zip"\n')
    with pytest.raises(ConfigError, match="store"):
        load_config(bad)


def test_ctrl_c_stops_after_the_committed_tick_and_says_how_to_go_on(tmp_path: Path) -> None:
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "run"
    cfg = tmp_path / "society.toml"
    cfg.write_text(
        f'out = "{out}"\nseed = 1\nllm = "sim/vllm-3b"\nclock = "virtual"\nprogress = false\n'
        'env = ["social_feed"]\nagents = 40\n'
    )
    cli = Path(sys.executable).with_name("agentlab")  # the installed console script
    cmd = [str(cli), "run", str(cfg), "--ticks", "100000"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    step = out / "SOCIETY_STEP.json"
    deadline = time.monotonic() + 120
    while (read_json(step, default=None) or {}).get("tick", 0) < 2:  # (written atomically)
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # Ctrl-C in the terminal
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    tick = Society.open(out, progress=False, read_only=True).tick
    assert f"stopped after tick {tick}; tick {tick + 1} was discarded" in stderr
    assert "Traceback" not in stderr
    assert f"interrupted: continue with `agentlab run {cfg} --resume`" in stdout
    assert main(_args(cfg, resume=True, ticks=1)) == 0
    assert Society.open(out, progress=False, read_only=True).tick == tick + 1


def test_ctrl_c_of_the_demo_reports_the_committed_run_and_exits_130(tmp_path: Path) -> None:
    # (it exited 0 and counted the stopped tick's tool calls and errors in its breakdown:
    # "tool errors 3 of 304 calls ... reply: ToolError 4, post: ToolArgumentError 4, ...")
    import signal
    import subprocess
    import sys
    import time

    from agentlab.store import open_run

    out = tmp_path / "demo"
    cli = Path(sys.executable).with_name("agentlab")
    cmd = [str(cli), "demo", "--out", str(out), "--agents", "60", "--ticks", "50"]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    deadline = time.monotonic() + 120
    while (read_json(out / "SOCIETY_STEP.json", default=None) or {}).get("tick", 0) < 1:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.05)
    time.sleep(0.5)  # into the next tick
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    tick = Society.open(out, progress=False, read_only=True).tick
    assert f"60 agents x {tick} ticks" in stdout and "status         stopped" in stdout
    line = next(x for x in stdout.splitlines() if x.startswith("  tool errors"))
    errors, calls = map(int, re.match(r"  tool errors\s+(\d+)\s+of (\d+) calls", line).groups())  # type: ignore[union-attr]
    assert sum(int(n) for n in re.findall(r"Error (\d+)", line)) == errors  # one count
    assert calls == len(open_run(out).sql("select 1 from spans where name = 'env.tool'"))
    assert f"run_sync(ticks={50 - tick})" in stdout
