"""What memory never stores: credentials, found by Yelp's detect-secrets plugins and the keys agents meet.

``find_secret`` returns the kind of the first secret in a text (never the
secret itself), so a refusal can name it without repeating it. The
high-entropy plugins are left out: commit hashes and ids in memos are not
secrets, and a refusal must be believable to be heeded.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

# the keys agents actually meet, most specific first
PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("Anthropic API key", re.compile(r"\bsk-ant-[A-Za-z0-9_\-]{16,}")),
    ("OpenAI API key", re.compile(r"\bsk-(?:proj-|svcacct-)?[A-Za-z0-9_\-]{20,}")),
    ("GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,})")),
    ("AWS access key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b")),
    ("Slack token", re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}")),
    ("private key", re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----")),
    ("JSON Web Token", re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}")),
    (
        "password or token assignment",
        re.compile(
            r"(?i)\b(?:password|passwd|pwd|passphrase|secret|token|api[_-]?key|access[_-]?key|auth[_-]?token"
            r"|client[_-]?secret|パスワード)\s*[:=：]\s*['\"]?(?=[^\s'\"]*[A-Za-z])[^\s'\"]{6,}"
        ),
    ),
)

# detect-secrets plugins that look for a known shape of key (not for mere randomness)
PLUGINS = (
    "ArtifactoryDetector",
    "AWSKeyDetector",
    "AzureStorageKeyDetector",
    "BasicAuthDetector",
    "CloudantDetector",
    "DiscordBotTokenDetector",
    "GitHubTokenDetector",
    "GitLabTokenDetector",
    "IbmCloudIamDetector",
    "IbmCosHmacDetector",
    "JwtTokenDetector",
    "KeywordDetector",
    "MailchimpDetector",
    "NpmDetector",
    "OpenAIDetector",
    "PrivateKeyDetector",
    "PypiTokenDetector",
    "SendGridDetector",
    "SlackDetector",
    "SoftlayerDetector",
    "SquareOAuthDetector",
    "StripeDetector",
    "TelegramBotTokenDetector",
    "TwilioKeyDetector",
)


@lru_cache(maxsize=1)
def _plugins() -> list[Any]:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    wanted = set(PLUGINS)
    classes: list[Any] = list(get_mapping_from_secret_type_to_class().values())
    return [cls() for cls in classes if cls.__name__ in wanted]


def find_secret(text: str) -> str | None:
    """The kind of the first secret found in ``text``, or None when it holds none."""
    for kind, pattern in PATTERNS:
        if pattern.search(text):
            return kind
    for number, line in enumerate(text.splitlines(), 1):
        for plugin in _plugins():
            found = plugin.analyze_line(filename="memory.txt", line=line, line_number=number)
            if found:
                return str(next(iter(found)).type)
    return None
