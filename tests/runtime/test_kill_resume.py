"""THE kill-and-resume equivalence test: kill -9 anywhere, resume, equal to no kill.

A forked child runs a society under the virtual clock and SIGKILLs itself (kill -9: no
cleanup, no flush, no atexit) at the K-th file-system event of one *kind*:

- ``create``: any write or rename while ``Society.create`` is still running;
- ``state``: an in-place agent-state write (``os.pwrite``: mid-batch);
- ``log``: a log write (``os.write`` of replay/trace rows, from any thread);
- ``torn-state`` / ``torn-log``: the same, but half the bytes reach the file first;
- ``env-ckpt``: the rename of an env checkpoint or a kept per-tick checkpoint file
  (before or after it);
- ``commit``: the rename of ``SOCIETY_STEP.json`` (before it, or right after it).

Kinds go round-robin over the trials and K is drawn at random among the events of that
kind in an uninterrupted run, so every kind is hit in several trials; every third trial
is killed again (and again) while resuming. The run is then resumed until it completes.
Every committed state file and every log row — timing columns and request ids included —
must equal the uninterrupted run (``resume_helpers`` names the three columns that may
differ, and why): no duplicates, no gaps, no drift.

Societies: ``counter`` (counter agents with LLM calls and injected step failures,
keeping every tick's checkpoint for ``Society.fork``) and
``llm`` (200 LLM persona agents on ``social_feed`` with ``sim/vllm-3b``), and ``llm-faults``
(60 of them with 10% rate limits and 5% timeouts, so kills land amid retries and limiter
cuts).
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

import agentlab.llm
import agentlab.runtime  # noqa: F401  (imported once here; forked children inherit it)
import tests.runtime.society_helpers  # noqa: F401  (registers the "test_notes" env)
from agentlab.agents import AgentBase, register_agent
from tests.runtime.resume_helpers import committed_files, diff_summary, strict_rows, strict_spans

UNTIL = 4
KINDS = ("create", "state", "log", "torn-state", "torn-log", "env-ckpt", "commit")
TRIALS = {"counter": 12, "llm": 21, "llm-faults": 7, "codegen": 7}
LLM_AGENTS = 200


def _society_kwargs(name: str) -> dict[str, Any]:
    from agentlab.runtime import RetryPolicy

    if name == "counter":
        return {
            "agents": [{"type": "counter", "n": 9, "config": {"llm_calls": 1, "fail_every": 3}}],
            "env": ["test_notes"],
            "llm": "sim/vllm-3b",
            "seed": 11,
            "batch_size": 3,
            "retry": RetryPolicy(max_attempts=2),
            "keep_checkpoints": True,  # per-tick checkpoints must survive kills too
        }
    if name == "codegen":  # the router's code cache and counters commit with the tick
        return {
            "agents": [
                {"type": "llm", "n": 16, "config": {"env_mode": "ask"}},
                {"type": "feed_reader", "n": 4},  # the same request each tick: cache hits
            ],
            "env": [{"type": "social_feed", "router": "codegen"}],
            "llm": "sim/vllm-3b",
            "seed": 5,
            "batch_size": 8,
        }
    if name == "llm-faults":  # 429s and timeouts: the limiter cuts, retries back off
        from agentlab.llm import LLMClient

        faults = {"sim_p_rate_limit": 0.1, "sim_p_timeout": 0.05}
        return {
            "agents": 60,
            "env": ["social_feed"],
            "llm": LLMClient("sim/vllm-3b", seed=7, **faults),
            "seed": 7,
            "batch_size": 16,
        }
    return {
        "agents": LLM_AGENTS,
        "env": ["social_feed"],
        "llm": "sim/vllm-3b",
        "seed": 7,
        "batch_size": 32,
    }


@register_agent("feed_reader")
class FeedReader(AgentBase):
    """Asks the env's router the same thing every tick (its program is cached)."""

    async def step(self, tick: int) -> None:
        assert self.services is not None and self.services.env is not None
        await self.services.env.ask("read my feed and like the newest post")


def _society_child(
    run_dir: str, society: str, kind: str, kill_at: int, before: bool, count_file: str
) -> None:
    # Runs in a forked child: patch the syscalls every durable change goes through.
    counts: dict[str, int] = dict.fromkeys(KINDS, 0)
    step_file = os.path.join(run_dir, "SOCIETY_STEP.json")
    real_replace, real_write, real_pwrite = os.replace, os.write, os.pwrite

    def hit(k: str) -> bool:
        counts[k] += 1
        return k == kind and counts[k] == kill_at

    def creating() -> bool:
        return not os.path.exists(step_file)

    def die() -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    def replace(src: Any, dst: Any, *a: Any, **k: Any) -> None:
        d = os.fspath(dst)
        k_ = "create" if creating() else ("commit" if d == step_file else None)
        if k_ is None and ("/env/ticks/" in d or "/checkpoints/" in d):
            k_ = "env-ckpt"
        killed = k_ is not None and hit(k_)
        if killed and before:
            die()
        real_replace(src, dst, *a, **k)
        if killed:
            die()

    def write(fd: int, data: Any) -> int:
        if creating():
            if hit("create"):
                die()
        elif hit("log") or hit("torn-log"):
            if kind == "torn-log" and len(data) > 1:
                real_write(fd, bytes(data[: len(data) // 2]))
            die()
        return real_write(fd, data)

    def pwrite(fd: int, data: Any, offset: int) -> int:
        if creating():
            if hit("create"):
                die()
        elif hit("state") or hit("torn-state"):
            if kind == "torn-state" and len(data) > 1:
                real_pwrite(fd, bytes(data[: len(data) // 2]), offset)
            die()
        return real_pwrite(fd, data, offset)

    os.replace, os.write, os.pwrite = replace, write, pwrite  # type: ignore[assignment]
    from agentlab.runtime import Society

    if os.path.exists(step_file):
        s = Society.open(run_dir, progress=False)
    else:
        s = Society.create(run_dir, clock="virtual", progress=False, **_society_kwargs(society))
    s.run_sync(until=UNTIL)
    s.close()
    if count_file:
        with open(count_file, "w") as f:
            f.write(json.dumps(counts))
    os._exit(0)


def _run_child(
    run_dir: Path,
    society: str,
    kind: str = "",
    kill_at: int = 0,
    before: bool = False,
    count_file: Path | None = None,
) -> int:
    ctx = mp.get_context("fork")
    args = (str(run_dir), society, kind, kill_at, before, str(count_file or ""))
    p = ctx.Process(target=_society_child, args=args)
    p.start()
    p.join(120)
    if p.exitcode is None:
        p.kill()
        pytest.fail("society child hung")
    return p.exitcode


@pytest.fixture(scope="module")
def references(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Uninterrupted runs, one per society, computed on first use."""
    return {}


def _reference(cache: dict[str, dict[str, Any]], name: str, base: Path) -> dict[str, Any]:
    if name in cache:
        return cache[name]
    d = base / f"ref-{name}" / "run"
    count = d.parent / "events.json"
    assert _run_child(d, name, count_file=count) == 0
    counts = json.loads(count.read_text())
    rows = strict_rows(d)
    if name == "llm-faults":  # the faults really happened, so kills land amid retries
        calls = [json.loads(r) for r in rows["llm_calls"]]
        assert sum(c["attempts"] > 1 for c in calls) > 10, "no call was retried"
    if name == "codegen":  # programs are reused, so a lost code cache would show
        assert any(json.loads(r)["cache_hit"] for r in rows["env_requests"]), "no cache hit"
    # "log" and "torn-log" count the same writes, as do the two state kinds.
    counts["torn-log"], counts["torn-state"] = counts["log"], counts["state"]
    cache[name] = {
        "society": name,
        "rows": rows,
        "files": committed_files(d),
        "spans": strict_spans(d),
        "counts": counts,
    }
    return cache[name]


def _trial(reference: dict[str, Any], run: Path, trial: int) -> list[str]:
    society, counts = reference["society"], reference["counts"]
    rng = random.Random(7000 + 97 * trial + len(society))
    kinds = [KINDS[trial % len(KINDS)]]
    if trial % 3 == 2:  # repeated kills: twice more while resuming
        kinds += [rng.choice(KINDS[1:]), rng.choice(KINDS[1:])]
    done: list[str] = []
    for i, kind in enumerate(kinds):
        assert counts[kind] > 0, f"an uninterrupted {society} run has no {kind!r} event"
        k = rng.randint(1, counts[kind])
        before = rng.random() < 0.5
        code = _run_child(run, society, kind, k, before)
        # Log writes come from a flush thread too, so their count varies a little: a
        # first kill that was not reached is drawn again, lower.
        while code == 0 and i == 0 and k > 1:
            shutil.rmtree(run)  # it ran to the end unharmed: start the trial over
            k = rng.randint(1, k - 1)
            code = _run_child(run, society, kind, k, before)
        if code == 0:
            break
        assert code == -signal.SIGKILL, f"child failed with exit code {code}"
        done.append(f"{kind}@{k}{'<' if before else '>'}")
    assert done, "no kill landed"
    if (
        not (run / "SOCIETY_STEP.json").exists()
        or json.loads((run / "SOCIETY_STEP.json").read_bytes())["tick"] < UNTIL
    ):
        assert _run_child(run, society) == 0
    return done


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize(
    ("society", "trial"), [(s, t) for s, n in TRIALS.items() for t in range(n)]
)
def test_kill_anywhere_then_resume_equals_uninterrupted(
    references: dict[str, dict[str, Any]],
    tmp_path_factory: pytest.TempPathFactory,
    tmp_path: Path,
    society: str,
    trial: int,
) -> None:
    reference = _reference(references, society, tmp_path_factory.getbasetemp())
    run = tmp_path / "run"
    kills = _trial(reference, run, trial)
    print(f"{society} trial {trial}: kills {kills}")  # shown with -s: where kills landed
    got = strict_rows(run)
    assert got == reference["rows"], f"after kills {kills}:\n" + diff_summary(
        reference["rows"], got
    )
    files = committed_files(run)
    assert files.keys() == reference["files"].keys(), f"after kills {kills}"
    bad = [k for k in files if files[k] != reference["files"][k]]
    assert not bad, f"after kills {kills}: committed files differ: {bad[:5]}"
    assert strict_spans(run) == reference["spans"], f"after kills {kills}"
