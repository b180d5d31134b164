"""EncodedHistory: a conversation still encoded as JSON lines reads as the decoded list, and
the simulator's lineage-keyed work on it equals the whole conversation's (issue 26)."""

from __future__ import annotations

import copy
import pickle
import random
from typing import Any

import orjson
import pytest

from agentlab.llm.encoded_history import NEAR, EncodedHistory, decode_lines
from agentlab.llm.sim_slots import prefix_digest, vouched
from agentlab.llm.sim_tools import _Context
from agentlab.llm.tokens import CharsTokenizer
from agentlab.runtime.threads.lineage import Lineages
from agentlab.runtime.threads.stores import MemoryThreadStore
from tests.llm.test_sim_tools_context import _message, _reference
from tests.runtime.threads.test_lineage import _whole_digest


def _lines(messages: list[dict[str, Any]]) -> bytearray:
    return bytearray(b"".join(orjson.dumps(m, option=orjson.OPT_APPEND_NEWLINE) for m in messages))


def _convo(r: random.Random, n: int) -> list[dict[str, Any]]:
    return [_message(r, k) for k in range(n)]


@pytest.mark.parametrize("seed", range(3))
def test_reads_equal_the_decoded_list(seed: int) -> None:
    """Every index, slice, iteration and reversal equals the list's, in any order of reads,
    and appends to the buffer after it was made are not read."""
    r = random.Random(seed)
    convo = _convo(r, 30)
    cut = r.randrange(0, 30)
    for trial in range(40):
        lines = _lines(convo[:cut])
        view = EncodedHistory(lines, cut, convo[cut:], lineage=trial)
        lines += b'{"role":"user","content":"later"}\n'  # the store's next commit
        assert len(view) == len(convo)
        for _ in range(6):
            if r.random() < 0.5:
                i = r.randrange(-len(convo), len(convo))
                assert view[i] == convo[i], i
            else:
                a, b = r.randrange(-35, 35), r.randrange(-35, 35)
                assert view[a:b] == convo[a:b], (a, b)
        assert view[::2] == convo[::2]
        assert list(reversed(view)) == convo[::-1]
        assert list(view) == convo and view.as_list() == convo
    with pytest.raises(IndexError):
        EncodedHistory(_lines(convo), len(convo), [])[len(convo)]


def test_a_read_near_the_end_decodes_only_those_lines() -> None:
    convo = _convo(random.Random(5), 40)
    view = EncodedHistory(_lines(convo), 40, [])
    assert view[-1] == convo[-1] and view[40 - NEAR :] == convo[40 - NEAR :]
    assert view._all is None  # nothing before them was decoded
    assert view[3] == convo[3] and view._all == convo  # far back: all of it, once
    assert decode_lines(b"") == [] and decode_lines(_lines(convo)) == convo
    for copied in (pickle.loads(pickle.dumps(view)), copy.copy(view)):  # lineage: per process
        assert type(copied) is list and copied == convo


@pytest.mark.parametrize("seed", range(3))
def test_sim_digest_and_context_of_a_lineage_equal_the_whole_conversation(seed: int) -> None:
    """Call after call on one lineage as the thread runtime hands it (the history so far
    still encoded, the new messages decoded): the same request hash, token count and
    context as the whole conversation, and only a few lines decoded per call."""
    r = random.Random(seed)
    tok = CharsTokenizer(3.9)
    lineage = Lineages(MemoryThreadStore()).fresh()
    convo: list[dict[str, Any]] = [{"role": "system", "content": "You are @alice."}]
    for k in range(30):
        new = [_message(r, 100 + k) for _ in range(r.randrange(1, 4))]
        view = EncodedHistory(_lines(convo), len(convo), new, lineage)
        convo += new
        assert vouched(view) == (lineage, len(convo))
        assert prefix_digest(f"s{seed}", "|f", view, tok) == _whole_digest(
            f"s{seed}", "|f", convo, tok
        ), k
        if k:  # the lineage's first call reads it all (by content); later ones the end
            assert view._all is None, k
        ctx = _Context(view)  # (its request may be a user message far back: decodes all)
        assert (ctx.me, ctx.ids, ctx.users, ctx.request) == _reference(convo), k
        convo.append({"role": "assistant", "content": f"reply {k} @bob p{k}.c.3"})
    assert vouched(EncodedHistory(_lines(convo), len(convo), [], 0)) is None  # no lineage
