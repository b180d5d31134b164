"""The Ray env actor: an :class:`EnvHost` that takes and returns its checkpoints as bytes.

Like a batch task, the actor never touches the run directory, so it may live on any node:
the driver reads the committed checkpoint files and passes their bytes to the actor's
constructor, and :meth:`EnvActor.checkpoint` returns the new checkpoint's bytes plus the
rows and spans the env's routers staged (``env_requests``, the routers' ``llm_calls``),
which the driver commits (``RayExecutor.env_checkpoint``). The modules themselves still
read and write files, but only in a private directory under the actor's temp dir.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agentlab.runtime.envhost import EnvHost, checkpoint_files, module_paths, modules_from_specs
from agentlab.runtime.staging import stage_root, staged_schema, take_log
from agentlab.store.scratch import ScratchDir

if TYPE_CHECKING:
    from agentlab.runtime.services import RunServices

__all__ = ["EnvActor", "EnvCheckpoint", "read_files"]


@dataclass(slots=True)
class EnvCheckpoint:
    """What the env actor returns for a tick: files to write and staged log bytes."""

    #: ``{relpath under the run: bytes}``: ``env/ticks/<t>/<i>.json``, the routers' state
    #: ``env/ticks/<t>/routers.json`` (when they have one) and, when published, each
    #: module's default state file
    files: dict[str, bytes]
    #: the checkpoint paths, in module order (``SOCIETY_STEP.json["env"]``)
    paths: list[str]
    log: dict[str, bytes] = field(default_factory=dict)
    schema: dict[str, dict[str, str]] = field(default_factory=dict)


def read_files(run_dir: str | os.PathLike[str], paths: list[str]) -> dict[str, bytes]:
    """``{rel: bytes}`` of the checkpoint of the modules' ``paths`` under ``run_dir``, the
    routers' state included (the driver's side; :func:`checkpoint_files`)."""
    return {rel: (Path(run_dir) / rel).read_bytes() for rel in checkpoint_files(run_dir, paths)}


class EnvActor:
    """Body of the Ray env actor (see the module docstring).

    Args:
        specs: the env module specs (``SOCIETY.json["env"]``).
        seed: the run seed.
        run_dir: the run's path, only as a name (staging directory, error messages).
        restore: ``{rel: bytes}`` of the committed checkpoint (:func:`read_files`), in
            module order, the routers' state (code cache, counters) with it.
    """

    def __init__(
        self, specs: list[Any], seed: int, run_dir: str, restore: dict[str, bytes] | None
    ) -> None:
        self.run_dir = run_dir
        # a scratch dir: a kill (ray.kill, a kernel restart) leaves it for the next sweep
        self._scratch = ScratchDir("agentlab-env")
        self.work = self._scratch.path
        self.host = EnvHost(modules_from_specs(specs))
        self._services: Any = None
        if restore:
            for rel, data in restore.items():
                target = self.work / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(data)
            self.host.restore(str(self.work), module_paths(list(restore)))

    def cleanup(self) -> str:
        """Remove the work directory now (``ray.kill`` ends the process without a cleanup:
        its scratch dir would wait for the next env actor's sweep). Returns its path."""
        self._scratch.close()
        return str(self.work)

    def info(self) -> tuple[list[dict[str, Any]], str]:
        return self.host.tools(), self.host.describe()

    def ping(self) -> int:
        return os.getpid()

    def where(self) -> tuple[str, int]:
        """``(Ray node id, pid)`` of the actor."""
        import ray

        return str(ray.get_runtime_context().get_node_id()), os.getpid()

    async def call(
        self, agent_id: str, name: str, arguments: dict[str, Any], tick: int
    ) -> tuple[bool, Any]:
        # Errors come back as values: a raised error would reach the agent wrapped in a
        # RayTaskError whose message (with a traceback) differs from the local executor's.
        try:
            return True, await self.host.call(agent_id, name, arguments, tick)
        except Exception as exc:
            return False, exc

    async def observe(self, agent_id: str, tick: int) -> str:
        return await self.host.observe(agent_id, tick)

    def _staged(self, services: Any) -> Any:
        # One services object for the actor's life, its rows and spans staged (committed
        # by the driver with the checkpoint; lost with the actor when a tick is lost).
        if self._services is None:
            from agentlab.store.replay import get_replay_sink
            from agentlab.store.trace import get_tracer

            root = stage_root(self.run_dir)
            take_log(root)
            services.stage(replay=get_replay_sink(root), trace=get_tracer(root), root=root)
            self._services = services
        return self._services

    async def ask(
        self, agent_id: str, text: str, tick: int, services: RunServices, module: str | None
    ) -> tuple[bool, Any]:
        try:  # errors as values, as call() does
            staged = self._staged(services)
            return True, await self.host.ask(agent_id, text, tick, staged, module)
        except Exception as exc:
            return False, exc

    async def run_skill_script(
        self, agent_id: str, code: str, path: str, allowed_tools: list[str], tick: int,
        services: RunServices,
    ) -> tuple[bool, Any]:  # fmt: skip
        try:  # errors as values, as call() does
            staged = self._staged(services)
            return True, await self.host.run_skill_script(
                agent_id, code, path, allowed_tools, tick, staged
            )
        except Exception as exc:
            return False, exc

    def take_tick_stats(self) -> dict[str, Any]:
        return self.host.take_tick_stats()

    async def step(self, tick: int) -> list[dict[str, Any]]:
        return await self.host.step(tick)

    def checkpoint(self, tick: int, publish: bool) -> EnvCheckpoint:
        """The checkpoint of ``tick`` as bytes, plus the rows staged since the last one."""
        paths = self.host.checkpoint(str(self.work), tick)  # also flushes the staged rows
        files = {rel: (self.work / rel).read_bytes() for rel in checkpoint_files(self.work, paths)}
        if publish:  # (before the tick's files go: publish copies them)
            for written in self.host.publish(str(self.work), paths):
                files[written.relative_to(self.work).as_posix()] = written.read_bytes()
        shutil.rmtree(self.work / Path(paths[0]).parent, ignore_errors=True)
        out = EnvCheckpoint(files, paths)
        if self._services is not None:
            root = stage_root(self.run_dir)
            out.log, out.schema = take_log(root), staged_schema(root)
        return out
