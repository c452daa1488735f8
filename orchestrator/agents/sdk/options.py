"""The spec's options in the SDK's shape: ``ClaudeAgentOptions`` for one session."""

from __future__ import annotations

from typing import Any

from orchestrator.agents.sdk.protocol import RunnerSpec
from orchestrator.agents.sdk.transcript import Output
from orchestrator.config.sdk import SystemPromptPreset


def system_prompt(value: str | SystemPromptPreset) -> Any:
    """The role's ``system_prompt`` in the SDK's shape: a plain string as is, else the preset (the default).

    The SDK turns an absent system prompt into an empty one, so the preset is always given.
    """
    if isinstance(value, str):
        return value
    prompt: dict[str, Any] = {"type": "preset", "preset": value.preset}
    if value.append:
        prompt["append"] = value.append
    return prompt


def build_options(spec: RunnerSpec, output: Output) -> Any:
    """``ClaudeAgentOptions`` for the spec; the CLI's stderr goes to ``output``."""
    from claude_agent_sdk import ClaudeAgentOptions

    options = spec.options
    kwargs: dict[str, Any] = {
        "system_prompt": system_prompt(options.system_prompt),
        "allowed_tools": list(options.allowed_tools),
        "disallowed_tools": list(options.disallowed_tools),
        "add_dirs": list(options.add_dirs),
        "env": dict(options.env),
        "stderr": output.cli_stderr,
    }
    for key in ("model", "permission_mode", "max_turns", "cli_path", "cwd", "setting_sources"):
        value = getattr(options, key)
        if value is not None:
            kwargs[key] = value
    caps = [v for v in (options.max_budget_usd, spec.per_run_usd) if v is not None]
    if caps:
        kwargs["max_budget_usd"] = min(caps)  # the CLI's own --max-budget-usd: the tighter cap
    if spec.per_run_usd is not None:
        kwargs["include_partial_messages"] = True  # the live fuse reads each model call's stream
    if spec.resume:
        kwargs["resume"] = spec.resume
    return ClaudeAgentOptions(**kwargs)
