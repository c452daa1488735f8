"""The one error tree of the orchestrator.

Every error a person can cause or meet is an ``OrchestratorError``; ``cli.main``
turns it into one line on stderr and its ``exit_code``, so no traceback ever
reaches the terminal for a bad configuration, memo or command line::

    OrchestratorError                 exit 1
    ├── ConfigError                   exit 2  roles.yaml, prompts, start-up checks
    ├── UsageError                    exit 2  a bad command line
    ├── NotRunningError               exit 4  no orchestrator serves this root
    ├── AlreadyRunningError           exit 5  a second `up` for the same root
    ├── UnknownRoleError              exit 10 `send --to` names no role of roles.yaml
    ├── RefusedError                  exit 13 an agent asked for what is for people (control/authority.py)
    ├── ControlError                  exit 1  the control channel said no
    │   ├── UnknownMemoError          exit 6  no memo matches
    │   ├── MemoFinishedError         exit 7  the memo already ended
    │   ├── AmbiguousMemoError        exit 8  several memos match
    │   ├── UnsupportedError          exit 9  the role's backend cannot do it
    │   └── DeadlineError             exit 11 a wait ran out; the line says what it still waited for
    ├── CrashLoopError                exit 3  a critical role keeps crashing
    ├── MemoryRefusedError            exit 20 memory: core full, or an entry too large
    ├── SecretRefusedError            exit 21 memory: the text holds a secret; nothing stored
    ├── MemoryUnavailableError        exit 22 memory: the database is corrupt, locked or unreadable
    ├── ExecutorError                 exit 30 executor ray: the cluster cannot be reached at start-up
    └── ServiceError                  exit 1  `service`: systemctl or journalctl said no
        └── NoSystemdError            exit 2  `service`: no systemctl here, or no user manager answers
"""

from __future__ import annotations


class OrchestratorError(Exception):
    """Base of every error meant for a person: one clear line, one exit status."""

    exit_code = 1


class ConfigError(OrchestratorError):
    """The configuration, a prompt file or a start-up check is wrong."""

    exit_code = 2


class UsageError(OrchestratorError):
    """The command line is wrong."""

    exit_code = 2


class CrashLoopError(OrchestratorError):
    """A critical role crashed too often in a row; the orchestrator ended."""

    exit_code = 3


class NotRunningError(OrchestratorError):
    """The command needs a running orchestrator and none serves this root."""

    exit_code = 4


class UnreachableError(NotRunningError):
    """An orchestrator may serve this root, but this process may not reach it (another user's, a sandbox, a path
    that cannot be followed): what it recorded is not this process's to read either."""


class AlreadyRunningError(OrchestratorError):
    """Another orchestrator already holds this project root."""

    exit_code = 5


class MemoryRefusedError(OrchestratorError):
    """A memory cap refuses the entry (core full, entry too large); nothing was stored or cut."""

    exit_code = 20


class SecretRefusedError(OrchestratorError):
    """The text holds a secret; it was neither stored nor logged."""

    exit_code = 21


class MemoryUnavailableError(OrchestratorError):
    """The memory database cannot be used now (corrupt, locked, unreadable)."""

    exit_code = 22


class UnknownRoleError(OrchestratorError):
    """A command names a role that ``roles.yaml`` does not have."""

    exit_code = 10


class ExecutorError(OrchestratorError):
    """The configured executor cannot be used (``executor: ray`` and no cluster at its address)."""

    exit_code = 30


class ServiceError(OrchestratorError):
    """``orchestrator service``: a systemd tool failed, or the unit cannot hold this root's paths."""

    exit_code = 1


class NoSystemdError(ServiceError):
    """``orchestrator service``: systemd is not there (no ``systemctl``), or no user manager answers."""

    exit_code = 2


class RefusedError(OrchestratorError):
    """An agent asked for what only people (or roles given ``may:``) may do; nothing was changed."""

    exit_code = 13
    code = "refused"


class ControlError(OrchestratorError):
    """The running orchestrator refused a request; ``code`` names why."""

    exit_code = 1
    code = "error"


class UnknownMemoError(ControlError):
    exit_code = 6
    code = "unknown_memo"


class MemoFinishedError(ControlError):
    exit_code = 7
    code = "finished"


class AmbiguousMemoError(ControlError):
    exit_code = 8
    code = "ambiguous"


class UnsupportedError(ControlError):
    exit_code = 9
    code = "unsupported"


class DeadlineError(ControlError):
    """A wait ran out before its answer came (a reply lost, a stop still under way): the line says what it still
    waited for, which may yet happen."""

    exit_code = 11
    code = "deadline"


# how a refusal travels over the control channel: its ``code`` names the class the client raises again
CONTROL_ERRORS: dict[str, type[OrchestratorError]] = {
    **{
        cls.code: cls
        for cls in (
            ControlError,
            UnknownMemoError,
            MemoFinishedError,
            AmbiguousMemoError,
            UnsupportedError,
            DeadlineError,
        )
    },
    "usage": UsageError,
    RefusedError.code: RefusedError,
}


def control_code(exc: OrchestratorError) -> str:
    """The wire code of an error raised while answering a control request."""
    if isinstance(exc, ControlError):
        return exc.code
    if isinstance(exc, RefusedError):
        return RefusedError.code
    return "usage" if isinstance(exc, UsageError) else "error"
