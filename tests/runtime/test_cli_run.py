"""``agentlab run`` (cli_run.main) with TOML and YAML configs, resume; the demo entry."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

from agentlab.errors import ConfigError
from agentlab.runtime import Society
from agentlab.runtime.cli_run import load_config, main

pytestmark = pytest.mark.filterwarnings("ignore::UserWarning")


def _args(config: Path, **kw: object) -> argparse.Namespace:
    base = {"config": str(config), "resume": False, "executor": None, "batch_size": None,
            "ticks": None, "out": None}  # fmt: skip
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
    assert main(_args(cfg, resume=True, ticks=3)) == 0
    s = Society.open(out, progress=False)
    assert s.tick == 3 and len(s.agent_ids) == 5
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
    assert "agent-steps" in text and "jupyter lab notebooks/05_replay_analysis.ipynb" in text
    assert "agentlab.open_run(" in text and "agentlab report" in text
    assert str((tmp_path / "demo").resolve()) in text
    s = Society.open(tmp_path / "demo", progress=False)
    assert s.tick == 1 and len(s.agent_ids) == 12


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
