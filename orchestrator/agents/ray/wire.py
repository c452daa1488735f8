"""What travels between the head and a wrapper on a worker: the task's payload and the messages it streams back.

Every message carries the attempt's lease, so a result that arrives after the head gave the attempt up (a partition,
a lost worker) is ignored, never acted on twice.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


class _Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Payload(_Wire):
    """Everything the wrapper needs: nothing is read from the head's disk on the worker."""

    run_id: int
    attempt: int
    lease: str
    role: str
    root: str  # the head's project root: an identity carried in the agent's environment, and its cwd if present
    argv: list[str]
    prompt: str
    prompt_via: Literal["stdin", "arg"]
    cwd: str  # relative to root
    env: dict[str, str]  # the role's env and the ORCHESTRATOR_* variables; the worker's own environment is the base
    memos: dict[str, str]  # file name -> text: copied into a private folder on the worker
    batch: bool
    poll: float
    beat: float
    lost_after: float
    #: how long the wrapper keeps its agent, then its end, for a head that is gone (0: ``lost_after``)
    reconnect_within: float = 0.0
    backend: Literal["command", "sdk"] = "command"
    #: ``backend: sdk``: the runner's spec as the head built it; the wrapper sets its ``cwd``, ``transcript`` and
    #: ``cli_path`` (``cli_path`` below, resolved on the worker)
    sdk_spec: dict[str, Any] | None = None
    cli_path: str | None = None


class _Message(_Wire):
    lease: str


class Started(_Message):
    type: Literal["started"] = "started"
    pid: int
    create_time: float
    node: str  # "ip/node-id-prefix"
    orphans: list[int] = []  # agents of dead wrappers on this node, killed before this one started
    node_id: str | None = None  # Ray's whole node id: a resumed sdk session prefers the node that has it


class StartFailed(_Message):
    type: Literal["start_failed"] = "start_failed"
    reason: str
    node: str


class Output(_Message):
    type: Literal["output"] = "output"
    data: str


class Beat(_Message):
    type: Literal["beat"] = "beat"


class Ended(_Message):
    """The agent's tree is dead: it exited by itself (``stopped`` false) or the wrapper killed it."""

    type: Literal["ended"] = "ended"
    code: int | None
    stopped: bool = False
    why: str | None = None  # why the wrapper stopped it: "asked", "lost the head"
    pids: list[int] = []
    seconds: float = 0.0
    escalated: bool = False
    survivors: list[int] = []
    at: float | None = None  # when the tree was found dead (epoch seconds, the node's clock); None: a wrapper before it


class SdkEvent(_Message):
    """One event line of an sdk runner (``orchestrator.agents.sdk.protocol``), as the runner wrote it."""

    type: Literal["sdk_event"] = "sdk_event"
    line: str


class TranscriptLines(_Message):
    """Whole lines the sdk runner appended to its transcript on the worker, for the head's copy."""

    type: Literal["transcript"] = "transcript"
    data: str


class ControlAnswer(_Message):
    """Whether a control message (interrupt, tell, end) from the head's mailbox reached the session."""

    type: Literal["control_answer"] = "control_answer"
    id: str
    refused: str | None = None  # one line for a person when it did not (the session had ended)


AnyMessage = Started | StartFailed | Output | Beat | Ended | SdkEvent | TranscriptLines | ControlAnswer
MESSAGE: TypeAdapter[AnyMessage] = TypeAdapter(Annotated[AnyMessage, Field(discriminator="type")])


def parse(data: Any) -> AnyMessage:
    """A message from its dict; a malformed one raises ``pydantic.ValidationError`` naming the field."""
    return MESSAGE.validate_python(data)
