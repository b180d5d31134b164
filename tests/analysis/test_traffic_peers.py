"""The trace exports read back by the tools they are for, in their own environments:
``mooncake_trace.jsonl`` by aiperf's ``mooncake_trace`` loader, ``guidellm_trace.jsonl``
by guidellm's ``trace_synthetic`` reader with its default column names (no overrides).

``scripts/peer_tools.sh`` installs both into ``.venv-peers/``; a failure fails the test.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from agentlab.analysis.sharegpt import export_sharegpt
from agentlab.analysis.traffic import export_traffic, traffic_trace
from agentlab.runtime import Society

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parents[2]
PEERS = ROOT / ".venv-peers"

AIPERF_READ = """
import json, sys
from aiperf.dataset.loader.models import MooncakeTrace
from aiperf.dataset.loader.mooncake_trace import MooncakeTraceDatasetLoader
rows = [json.loads(line) for line in open(sys.argv[1])]
assert all(MooncakeTraceDatasetLoader.can_load(data=r) for r in rows)
out = [MooncakeTrace.model_validate(r) for r in rows]
print(json.dumps([[t.timestamp, t.input_length, t.output_length] for t in out]))
"""

GUIDELLM_READ = """
import json, sys
from datasets import Dataset
from faker import Faker
from transformers import AutoTokenizer
from guidellm.data.deserializers.trace_common import TraceFormatRegistry, _validate_row
from guidellm.schemas.data.deserializers import MinimalTraceFormatArgs
cfg = MinimalTraceFormatArgs(source={"kind": "json_file", "path": sys.argv[1]})
ds = Dataset.from_json(sys.argv[1])
fmt = TraceFormatRegistry.dispatch(cfg, ds)
assert fmt.find_required_columns(ds.column_names) == [] and fmt.has_duration_column()
tok = AutoTokenizer.from_pretrained(sys.argv[2])
out = []
for row in ds:
    _validate_row(row, cfg)
    prompt = fmt.create_prompt(row, tok, Faker())
    out.append([row[cfg.timestamp_column], row[cfg.prompt_tokens_column],
                row[cfg.output_tokens_column], row[cfg.duration_column],
                len(tok(prompt, add_special_tokens=False).input_ids)])
print(json.dumps(out))
"""


def _read(tool: str, script: str, *args: str) -> list[list[float]]:
    py = PEERS / tool / "bin" / "python"
    res = subprocess.run([str(py), "-c", script, *args], capture_output=True, text=True,
                         timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def test_aiperf_and_guidellm_read_the_trace_exports_unmodified(tmp_path: Path) -> None:
    subprocess.run(["bash", str(ROOT / "scripts/peer_tools.sh")], check=True, timeout=900,
                   capture_output=True)  # fmt: skip
    soc = Society.create(tmp_path / "run", agents=[{"type": "counter", "n": 8,
                         "config": {"llm_calls": 2}}], llm="sim/vllm-3b", seed=5,
                         clock="virtual", progress=False)  # fmt: skip
    soc.run_sync(ticks=2)
    soc.close()
    paths = export_traffic(tmp_path / "run", tmp_path / "out")
    trace = [json.loads(line) for line in paths["trace"].read_text().splitlines()]
    assert len(trace) == 32 and len({c["completion_tokens"] for c in trace}) > 1

    aiperf = _read("aiperf", AIPERF_READ, str(paths["mooncake"]))
    assert len(aiperf) == len(trace)
    for (ts_ms, n_in, n_out), c in zip(aiperf, trace, strict=True):
        assert ts_ms == pytest.approx(c["t"] * 1000, abs=1e-3)
        assert (n_in, n_out) == (c["prompt_tokens"], c["completion_tokens"])

    guidellm = _read("guidellm", GUIDELLM_READ, str(paths["guidellm_trace"]),
                     str(PEERS / "tokenizer"))  # fmt: skip
    assert len(guidellm) == len(trace)
    for (ts, n_in, n_out, duration, prompt_tokens), c in zip(guidellm, trace, strict=True):
        assert ts == pytest.approx(c["t"], abs=1e-6)
        assert duration == pytest.approx(c["latency"], abs=1e-6)
        assert (n_in, n_out) == (c["prompt_tokens"], c["completion_tokens"])
        assert prompt_tokens == n_in  # guidellm builds a prompt of exactly that size


SHAREGPT_READ = """
import json, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[2])
with open(sys.argv[1], encoding="utf-8") as f:  # vLLM's ShareGPTDataset.load_data + sample
    data = [e for e in json.load(f) if "conversations" in e and len(e["conversations"]) >= 2]
print(json.dumps([[e["id"], len(tok(e["conversations"][0]["value"]).input_ids),
                   len(tok(e["conversations"][1]["value"]).input_ids)] for e in data]))
"""


def test_sharegpt_lengths_under_a_hugging_face_tokenizer(tmp_path: Path) -> None:
    """vLLM's ShareGPT length rule (``len(tokenizer(text).input_ids)``) run with
    transformers and the Llama-3 vocabulary as a Hugging Face tokenizer. That local
    tokenizer adds no BOS (Meta's adds ``<|begin_of_text|>``: the export's default
    ``special_tokens=1``), so the file is written with ``special_tokens=0`` here."""
    subprocess.run(["bash", str(ROOT / "scripts/peer_tools.sh")], check=True, timeout=900,
                   capture_output=True)  # fmt: skip
    soc = Society.create(tmp_path / "run", agents=[{"type": "llm", "n": 6}], llm="sim/vllm-3b",
                         seed=5, clock="virtual", progress=False)  # fmt: skip
    soc.run_sync(ticks=2)
    soc.close()
    res = export_sharegpt(tmp_path / "run", tmp_path / "sharegpt.json", special_tokens=0)
    calls = {c["id"]: c for c in traffic_trace(tmp_path / "run")}
    got = _read("guidellm", SHAREGPT_READ, str(res["path"]), str(PEERS / "tokenizer"))
    assert len(got) == len(calls) == res["entries"]
    assert len({o for _, _, o in got}) > 3
    for rid, p, o in got:
        assert (p, o) == (calls[rid]["prompt_tokens"], calls[rid]["completion_tokens"])
