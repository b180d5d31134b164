"""``SocialFeed``: a small social network (post, read feed, follow, like, reply).

Semantics are *simultaneous update*, as in synchronous agent-based models: what agents
write during tick ``t`` (posts, replies, likes, follows' effect on counts) is staged and
published by ``step(t)`` in a canonical order (by agent id, then each agent's own call
order). Reads during tick ``t`` see the world as of the end of tick ``t-1``, plus the
reader's own follows. So the result of a tick does not depend on how agents' calls
interleave — the local and the Ray executor produce the same state and the same event log.

Costs (a society of 10k agents calls this every tick): ``post``/``reply``/``like``/
``follow`` are O(1); ``read_feed`` is O(F + limit·log F) with F = accounts followed
(capped by ``max_following``); ``step`` is O(P log P) for the P actions of the tick.
"""

from __future__ import annotations

import heapq
from collections import deque
from typing import Any, Literal

from agentlab.core.ids import validate_agent_id
from agentlab.env.base import EnvBase
from agentlab.env.registry import register_env
from agentlab.env.tools import tool
from agentlab.errors import InvalidAgentIdError, ToolError

__all__ = ["SocialFeed"]

_DEFAULT_WORLD = (
    "You live in Larkhaven, a mid-sized coastal town, and share a public social feed with "
    "your neighbours. People post about local news, work, hobbies and town debates "
    "(the new tram line, the harbour redevelopment, school budgets)."
)


@register_env("social_feed")
class SocialFeed(EnvBase):
    """A public social feed where agents post, read, follow, like and reply.

    Args:
        world: the world description given to agents.
        max_post_chars: longer posts are refused (the error says so).
        max_feed: most posts one ``read_feed`` returns.
        max_following: most accounts one agent may follow.
        recent_window: posts kept in the global "recent" stream.
        popular_window: ticks a post stays eligible for the "popular" stream.
    """

    # posts, follows and likes take effect at step(): a tick's tool results do not depend
    # on the order agents call in (so a virtual run on Ray equals the local one)
    tick_synchronous = True

    def __init__(
        self,
        world: str = _DEFAULT_WORLD,
        max_post_chars: int = 280,
        max_feed: int = 20,
        max_following: int = 500,
        recent_window: int = 200,
        popular_window: int = 3,
    ) -> None:
        super().__init__(
            world=world,
            max_post_chars=max_post_chars,
            max_feed=max_feed,
            max_following=max_following,
            recent_window=recent_window,
            popular_window=popular_window,
        )
        self._reset()

    def _reset(self) -> None:
        self.posts: dict[str, dict[str, Any]] = {}  # published, in publish order
        self.order: list[str] = []  # publish index -> post id
        self.index_of: dict[str, int] = {}
        self.by_author: dict[str, list[int]] = {}  # publish indices, ascending
        self.liked_by: dict[str, set[str]] = {}
        self.following: dict[str, set[str]] = {}
        self.follower_count: dict[str, int] = {}
        self.recent: deque[str] = deque(maxlen=int(self.config["recent_window"]))
        self.popular: list[str] = []
        # staged during the tick in progress: (agent, agent_seq, kind, payload)
        self.pending: list[tuple[str, int, str, dict[str, Any]]] = []
        self.agent_seq: dict[str, int] = {}
        self.pending_likes: set[tuple[str, str]] = set()

    def init(self, seed: int = 0) -> None:
        super().init(seed)
        self._reset()

    # --- tools -------------------------------------------------------------------------

    @tool
    def post(self, content: str, agent_id: str) -> dict[str, Any]:
        """Publish a post on the public feed (visible to others from the next tick).

        Args:
            content: the text of the post.

        Returns:
            the new post's id.
        """
        return self._stage_post(agent_id, content, None)

    @tool
    def reply(self, post_id: str, content: str, agent_id: str) -> dict[str, Any]:
        """Reply to a post.

        Args:
            post_id: id of the post to reply to (from read_feed).
            content: the text of the reply.

        Returns:
            the reply's id.
        """
        self._published(post_id)
        return self._stage_post(agent_id, content, post_id)

    @tool
    def like(self, post_id: str, agent_id: str) -> dict[str, Any]:
        """Like a post (liking the same post twice has no effect).

        Args:
            post_id: id of the post to like (from read_feed).

        Returns:
            whether this call added a like.
        """
        self._published(post_id)
        key = (agent_id, post_id)
        already = agent_id in self.liked_by[post_id] or key in self.pending_likes
        if not already:
            self.pending_likes.add(key)
            self._stage(agent_id, "like", {"post_id": post_id})
        return {"post_id": post_id, "liked": not already}

    @tool
    def follow(self, user: str, agent_id: str) -> dict[str, Any]:
        """Follow another user so their posts appear in your feed.

        Args:
            user: the id of the user to follow.

        Returns:
            whether this call started a new follow, and how many users you follow.
        """
        try:
            validate_agent_id(user)
        except InvalidAgentIdError as exc:
            raise ToolError(f"cannot follow {user!r}: {exc}") from None
        if user == agent_id:
            raise ToolError("you cannot follow yourself")
        mine = self.following.setdefault(agent_id, set())
        if user in mine:
            return {"user": user, "followed": False, "following": len(mine)}
        limit = int(self.config["max_following"])
        if len(mine) >= limit:
            raise ToolError(f"you already follow {limit} users (the maximum); unfollow someone")
        mine.add(user)  # own follows take effect at once: only the follower's reads change
        self._stage(agent_id, "follow", {"user": user})
        return {"user": user, "followed": True, "following": len(mine)}

    @tool
    def unfollow(self, user: str, agent_id: str) -> dict[str, Any]:
        """Stop following a user.

        Args:
            user: the id of the user to unfollow.
        """
        mine = self.following.get(agent_id, set())
        if user not in mine:
            return {"user": user, "unfollowed": False}
        mine.discard(user)
        self._stage(agent_id, "unfollow", {"user": user})
        return {"user": user, "unfollowed": True}

    @tool
    def read_feed(
        self,
        agent_id: str,
        limit: int = 10,
        source: Literal["following", "recent", "popular"] = "following",
    ) -> list[dict[str, Any]]:
        """Read posts, newest first.

        Args:
            limit: how many posts (at most the feed size).
            source: "following" (people you follow; recent posts if you follow nobody),
                "recent" (everyone), or "popular" (most liked lately).

        Returns:
            posts with id, author, content, tick, likes, replies and reply_to.
        """
        limit = max(0, min(int(limit), int(self.config["max_feed"])))
        followed = self.following.get(agent_id)
        if source == "popular":
            ids = self.popular[:limit]
        elif source == "recent" or not followed:
            ids = list(self._newest(self.recent, limit))
        else:
            ids = self._merge_following(followed, limit)
        return [self._view(pid) for pid in ids]

    # --- helpers -----------------------------------------------------------------------

    def _stage(self, agent_id: str, kind: str, payload: dict[str, Any]) -> int:
        seq = self.agent_seq.get(agent_id, 0)
        self.agent_seq[agent_id] = seq + 1
        self.pending.append((agent_id, seq, kind, payload))
        return seq

    def _stage_post(self, agent_id: str, content: str, reply_to: str | None) -> dict[str, Any]:
        text = content.strip()
        if not text:
            raise ToolError("a post needs some text")
        limit = int(self.config["max_post_chars"])
        if len(text) > limit:
            raise ToolError(f"post is {len(text)} characters; the limit is {limit}")
        seq = self.agent_seq.get(agent_id, 0)
        # the id depends only on (tick, author, author's own call order): interleaving-proof
        post_id = f"{self.tick}.{agent_id}.{seq}"
        self._stage(agent_id, "reply" if reply_to else "post",
                    {"post_id": post_id, "content": text, "reply_to": reply_to})  # fmt: skip
        return {"post_id": post_id, "visible_from_tick": self.tick + 1}

    def _published(self, post_id: str) -> None:
        if post_id not in self.posts:
            raise ToolError(
                f"no published post {post_id!r}; use an id returned by read_feed "
                "(posts become visible the tick after they are written)"
            )

    def _view(self, pid: str) -> dict[str, Any]:
        # Built field by field in one fixed order: this dict reaches agents' prompts, so it
        # must not depend on how the post was stored or restored.
        p = self.posts[pid]
        return {
            "id": p["id"],
            "author": p["author"],
            "content": p["content"],
            "tick": p["tick"],
            "reply_to": p["reply_to"],
            "replies": p["replies"],
            "likes": len(self.liked_by[pid]),
        }

    @staticmethod
    def _newest(ids: deque[str] | list[str], limit: int) -> list[str]:
        n = len(ids)
        return [ids[n - 1 - i] for i in range(min(limit, n))]

    def _merge_following(self, followed: set[str], limit: int) -> list[str]:
        # k-way merge of the followed authors' newest posts (keys: negated publish index)
        heap: list[tuple[int, str, int]] = []
        for author in followed:
            lst = self.by_author.get(author)
            if lst:
                heap.append((-lst[-1], author, len(lst) - 1))
        heapq.heapify(heap)
        out: list[str] = []
        while heap and len(out) < limit:
            neg, author, i = heapq.heappop(heap)
            out.append(self.order[-neg])
            if i > 0:
                heapq.heappush(heap, (-self.by_author[author][i - 1], author, i - 1))
        return out

    # --- lifecycle ---------------------------------------------------------------------

    def step(self, tick: int) -> None:
        """Publish the tick's staged actions in canonical order and emit their events."""
        for agent_id, _, kind, p in sorted(self.pending, key=lambda a: (a[0], a[1])):
            if kind in {"post", "reply"}:
                self._publish(agent_id, p, tick)
                extra = {"reply_to": p["reply_to"]} if kind == "reply" else {}
                self.emit(kind, tick=tick, agent_id=agent_id, post_id=p["post_id"],
                          content=p["content"], **extra)  # fmt: skip
            elif kind == "like":
                likers = self.liked_by[p["post_id"]]
                if agent_id not in likers:
                    likers.add(agent_id)
                    author = self.posts[p["post_id"]]["author"]
                    self.emit(
                        "like", tick=tick, agent_id=agent_id, post_id=p["post_id"], author=author
                    )
            elif kind in {"follow", "unfollow"}:
                delta = 1 if kind == "follow" else -1
                self.follower_count[p["user"]] = self.follower_count.get(p["user"], 0) + delta
                self.emit(kind, tick=tick, agent_id=agent_id, user=p["user"])
        self.pending = []
        self.agent_seq = {}
        self.pending_likes = set()
        self._refresh_popular(tick)
        super().step(tick)

    def _publish(self, agent_id: str, p: dict[str, Any], tick: int) -> None:
        pid = p["post_id"]
        self.posts[pid] = _post_record(pid, agent_id, p["content"], tick, p["reply_to"], 0)
        self._index(pid, agent_id)
        self.recent.append(pid)
        if p["reply_to"] in self.posts:
            self.posts[p["reply_to"]]["replies"] += 1

    def _index(self, pid: str, author: str) -> None:
        self.index_of[pid] = len(self.order)
        self.by_author.setdefault(author, []).append(len(self.order))
        self.order.append(pid)
        self.liked_by[pid] = set()

    def _refresh_popular(self, tick: int) -> None:
        window = int(self.config["popular_window"])
        candidates = (pid for pid in self.recent if self.posts[pid]["tick"] > tick - window)
        self.popular = heapq.nsmallest(
            int(self.config["max_feed"]),
            candidates,
            key=lambda pid: (-len(self.liked_by[pid]), -self.index_of[pid]),
        )

    def describe(self, agent_id: str | None = None) -> str:
        """World description plus a one-line status for ``agent_id``."""
        text = f"{self.config['world']} The feed has {len(self.posts)} posts."
        if agent_id is not None:
            text += (
                f" You are @{agent_id}; you follow {len(self.following.get(agent_id, ()))} "
                f"users and have {self.follower_count.get(agent_id, 0)} followers."
            )
        return text + " Tools: " + ", ".join(self.tool_specs()) + "."

    # --- persistence -------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "posts": list(self.posts.values()),
            "liked_by": {pid: sorted(v) for pid, v in self.liked_by.items() if v},
            "following": {a: sorted(v) for a, v in sorted(self.following.items()) if v},
            "follower_count": dict(sorted(self.follower_count.items())),
            "recent": list(self.recent),
            "popular": list(self.popular),
            "pending": [list(p) for p in self.pending],
            "agent_seq": dict(self.agent_seq),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._reset()
        for p in state.get("posts", []):
            self.posts[p["id"]] = _post_record(
                p["id"], p["author"], p["content"], p["tick"], p.get("reply_to"), p["replies"]
            )
            self._index(p["id"], p["author"])
        for pid, likers in state.get("liked_by", {}).items():
            self.liked_by[pid] = set(likers)
        self.following = {a: set(v) for a, v in state.get("following", {}).items()}
        self.follower_count = dict(state.get("follower_count", {}))
        self.recent.extend(state.get("recent", []))
        self.popular = list(state.get("popular", []))
        self.pending = [(a, int(s), k, dict(p)) for a, s, k, p in state.get("pending", [])]
        self.agent_seq = dict(state.get("agent_seq", {}))
        self.pending_likes = {(a, p["post_id"]) for a, _, k, p in self.pending if k == "like"}


def _post_record(
    pid: str, author: str, content: str, tick: int, reply_to: str | None, replies: int
) -> dict[str, Any]:
    """A published post, fields in the one canonical order (publish and restore alike)."""
    return {
        "id": pid,
        "author": author,
        "content": content,
        "tick": int(tick),
        "reply_to": reply_to,
        "replies": int(replies),
    }
