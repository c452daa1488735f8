"""What the Claude Code CLI's error output means: one line for a person, and whether a retry can help.

Claude Code 2.1 writes most of its failures to stdout and into a stream-json ``result``, not to stderr. This module
imports nothing of the orchestrator, so the sdk runner uses it too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

_NOT_LOGGED_IN = re.compile(r"not logged in|/login|invalid api key|authenticat|unauthori[sz]ed", re.I)
# what Claude Code 2.1 says when the API answers 401 to the key it was given
_KEY_REJECTED = re.compile(r"fix external api key|invalid x-api-key|authentication_error|\b401\b", re.I)
_PERMISSION = re.compile(
    r"(dangerously-skip-permissions|bypassPermissions).{0,80}(cannot|root|sudo|not allowed)|"
    r"cannot be used with root",
    re.I,
)
_OVERLOADED = re.compile(r"overloaded|\b529\b", re.I)
_RATE = re.compile(r"rate.?limit|\b429\b", re.I)
# a Claude plan's limit, as the CLI words it: "Claude AI usage limit reached|1767225600", "5-hour limit reached"
_USAGE = re.compile(r"usage limit reached|(5-hour|five.hour|weekly|session|opus) limit reached|limit will reset", re.I)
_RESET_EPOCH = re.compile(r"limit reached\|(\d{9,11})\b")
_AUTH_KINDS = {"oauth_org_not_allowed", "account_on_hold", "verification_required", "cloud_credential_error"}
# the CLI's names for a plan's limit windows (a ``rate_limit_event``'s ``rateLimitType``), as ours
LIMIT_WINDOWS = {
    "five_hour": "five_hour",
    "seven_day": "weekly",
    "seven_day_opus": "weekly",
    "seven_day_sonnet": "weekly",
}


@dataclass(frozen=True)
class Problem:
    """A known failure: the one-line reason, and ``permanent`` when no retry can help.

    ``limit_kind``: the account's usage or rate limit (``five_hour``, ``weekly``, ``usage_limit``, ``rate_limit``)
    caused it, so the account should wait rather than the memo fail; ``resets_at``: when it resets (epoch seconds),
    if said."""

    reason: str
    permanent: bool = False
    limit_kind: str | None = None
    resets_at: float | None = None


def one_line(text: str, limit: int = 240) -> str:
    """Whitespace collapsed, cut to ``limit`` characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def classify(text: str, error_kind: str | None = None, status: int | None = None) -> Problem | None:
    """The problem ``text`` (and the API's error kind and HTTP status, when known) describes, or None."""
    detail = one_line(text, 200)
    if _PERMISSION.search(text):
        return Problem(
            f"Claude Code refused the permission mode ({detail}); as root, bypassPermissions needs IS_SANDBOX=1 "
            "in a sandbox, or choose another permission_mode",
            permanent=True,
        )
    if status == 401 or _KEY_REJECTED.search(text):
        return Problem(
            f"the Anthropic API rejected the API key (401: {detail}); check ANTHROPIC_API_KEY "
            "(or the CLI's login) and ANTHROPIC_BASE_URL",
            permanent=True,
        )
    if error_kind == "authentication_failed" or _NOT_LOGGED_IN.search(text):
        return Problem(
            f"Claude Code is not logged in ({detail}); run `claude` once and sign in with /login, "
            "or set ANTHROPIC_API_KEY",
            permanent=True,
        )
    if error_kind in _AUTH_KINDS:
        return Problem(f"the Anthropic account cannot be used ({error_kind}: {detail})", permanent=True)
    if status == 529 or error_kind == "overloaded" or _OVERLOADED.search(text):
        return Problem(f"the Anthropic API is overloaded ({detail}); try again later")
    if status == 429 or error_kind == "rate_limit" or _RATE.search(text) or _USAGE.search(text):
        kind, resets_at = limit_in(text)
        return Problem(
            f"rate limited by the Anthropic API ({detail}); try again later", limit_kind=kind, resets_at=resets_at
        )
    if error_kind == "billing_error":
        return Problem(f"the Anthropic account has a billing problem ({detail})", permanent=True)
    if text.startswith("API Error") or error_kind in {"server_error", "invalid_request", "model_not_found"}:
        return Problem(f"the Anthropic API returned an error ({detail})")
    return None


def limit_kind(text: str) -> str:
    """Which limit a rate-limit message names: ``five_hour``, ``weekly``, ``usage_limit`` (a plan's, window not
    said), or plain ``rate_limit``."""
    if re.search(r"5-hour|five.hour|session limit", text, re.I):
        return "five_hour"
    if re.search(r"weekly|7.day|seven.day|opus limit", text, re.I):
        return "weekly"
    if re.search(r"usage limit", text, re.I):
        return "usage_limit"
    return "rate_limit"


def limit_in(text: str) -> tuple[str, float | None]:
    """The limit a rate-limit message names (``limit_kind``) and its reset, when it says one (epoch seconds)."""
    epoch = _RESET_EPOCH.search(text)
    return limit_kind(text), float(epoch.group(1)) if epoch else None


def hit_limit(window: Any, resets_at: Any) -> tuple[str, float | None]:
    """A rejected ``rate_limit_event``'s window and reset, as our limit kind and epoch seconds (None: not said)."""
    window = str(window or "")
    resets = float(resets_at) if isinstance(resets_at, int | float) else None
    return LIMIT_WINDOWS.get(window, window or "rate_limit"), resets


def result_limit(result: dict[str, Any], error_kind: str | None) -> tuple[str, float | None] | None:
    """(kind, resets_at) of an error result that is the account's rate limit (HTTP 429, a ``rate_limit_error``, or
    the assistant message's ``error: rate_limit``), read from its errors or text; None when it is not one."""
    status, kind = result.get("api_error_status"), result.get("api_error_type")
    if status != 429 and kind != "rate_limit_error" and error_kind != "rate_limit":
        return None
    return limit_in(" ".join(str(e) for e in result.get("errors") or []) or str(result.get("result") or ""))


ATTEMPT_HEADER = r"=== run \d+ attempt \d+"  # the orchestrator's line before each attempt's output in a run's log
_NOISE = re.compile(rf"^\s*({ATTEMPT_HEADER}|sdk_runner:)")


def last_meaningful_line(text: str) -> str | None:
    """The last line of output that says something (not blank, not one of the orchestrator's own headers)."""
    for line in reversed(text.splitlines()):
        if line.strip() and not _NOISE.match(line):
            return one_line(line, 200)
    return None
