"""What the head puts into the cluster: the stop board actor and the Ray task's body that runs the wrapper."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from orchestrator.agents.ray.wire import Payload


class StopBoard:
    """An actor on the head that the wrappers poll: stop requests by lease, and each sdk attempt's mailbox of
    control messages, handed out once, with the stop request, in the same poll."""

    def __init__(self) -> None:
        self.asked: dict[str, float] = {}
        self.mail: dict[str, list[dict[str, Any]]] = {}

    def stop(self, lease: str, grace: float) -> None:
        self.asked.setdefault(lease, grace)

    def post(self, lease: str, control: dict[str, Any]) -> None:
        self.mail.setdefault(lease, []).append(control)

    def poll(self, lease: str) -> tuple[float | None, list[dict[str, Any]]]:
        return self.asked.get(lease), self.mail.pop(lease, [])

    def forget(self, lease: str) -> None:
        self.asked.pop(lease, None)
        self.mail.pop(lease, None)


def wrapper_task(payload: dict[str, Any], board: Any) -> Iterator[dict[str, Any]]:
    """The Ray task's body, on a worker: the wrapper's messages as dicts (``orchestrator.agents.ray.wire``)."""
    import ray

    from orchestrator.agents.ray import wrapper

    spec = Payload.model_validate(payload)
    context = ray.get_runtime_context()
    node = f"{ray.util.get_node_ip_address()}/{context.get_node_id()[:8]}"
    timeout = max(1.0, spec.poll * 10)
    mail: list[dict[str, Any]] = []

    def ask() -> float | None:  # the stop request, and an sdk attempt's controls, in one call
        grace, controls = ray.get(board.poll.remote(spec.lease), timeout=timeout)
        mail.extend(controls)
        return grace if grace is None else float(grace)

    def inbox() -> list[dict[str, Any]]:
        controls = list(mail)
        mail.clear()
        return controls

    for message in wrapper.run(spec, ask, node, inbox if spec.backend == "sdk" else None):
        data = message.model_dump()
        if data["type"] == "started":
            data["node_id"] = context.get_node_id()
        yield data
