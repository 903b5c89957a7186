"""Redaction of secret values before anything is written (logs, state, records).

A value is secret when its variable's name is listed in a spec's ``secrets``, or
looks like a credential (``*_TOKEN``, ``*_SECRET*``, ``*PASSWORD*``, ``*_KEY`` ...),
or the value itself has a well-known credential shape (AWS keys, GitHub/HF tokens,
private key blocks).

Two kinds of masking, so that redaction never mangles what is not a secret:

* under a secret-looking key (``{"HF_TOKEN": ...}``) the value is always masked, whatever it is;
* a secret's value is masked *wherever else it appears* (a command line, a script, a path)
  only when it is long enough to be a secret (``maskable``): at least 8 characters, not a
  path, and either 16+ characters or a mix of at least two of lower case, upper case,
  digits and symbols. ``HF_TOKEN=python3`` would otherwise turn every ``python3`` of a
  record into ``***REDACTED***``; such a value is masked only under its own key.
"""

from __future__ import annotations

import functools
import os
import re

SECRET_NAME_RE = re.compile(
    r"(TOKEN|SECRET|PASSWORD|PASSWD|API_KEY|ACCESS_KEY|PRIVATE_KEY|CREDENTIAL|_KEY$|^KEY$|AUTH(?!OR))", re.IGNORECASE)
SECRET_VALUE_RES = [
    re.compile(r"AKIA[0-9A-Z]{16}"),
    re.compile(r"(?:ghp|gho|ghu|ghs|github_pat)_[A-Za-z0-9_]{20,}"),
    re.compile(r"hf_[A-Za-z0-9]{20,}"),
    re.compile(r"sk-[A-Za-z0-9_-]{20,}"),
    re.compile(r"xox[abprs]-[A-Za-z0-9-]{10,}"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?-----END [A-Z ]*PRIVATE KEY-----"),
]
MASK = "***REDACTED***"


MIN_SECRET_LEN = 8


# Kept: a pure function of an immutable string, asked of every key of every redacted dict and
# of every environment variable (~300 times per launch at ~3 us for the case-blind regex).
@functools.lru_cache(maxsize=4096)
def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME_RE.search(name))


def maskable(value: str) -> bool:
    """Whether a secret's value is distinctive enough to be masked wherever it appears: at
    least MIN_SECRET_LEN characters, not a path, and 16+ characters or two character classes.
    Short or common values (``python3``, ``true``, ``/usr/bin``, ``localhost``) are not: masking
    them everywhere would mangle paths and commands, and they are masked under their own key."""
    v = value.strip()
    if len(v) < MIN_SECRET_LEN:
        return False
    if v.startswith(("/", "~/", "./", "../")):
        return False
    classes = sum((any(c.islower() for c in v), any(c.isupper() for c in v), any(c.isdigit() for c in v),
                   any(not c.isalnum() for c in v)))
    return len(v) >= 16 or classes >= 2


def secret_values(names=(), environ=None) -> set[str]:
    """Values of the environment that must never be written: named secrets and look-alikes."""
    return _secret_values(set(names), os.environ if environ is None else environ)


def _secret_values(names, environ) -> set[str]:
    vals = set()
    for k, v in environ.items():
        if (k in names or is_secret_name(k)) and v and maskable(v):
            vals.add(v)
    return vals


def mask_values(extra_values=()) -> list[str]:
    """The values to mask, longest first (so a secret containing another is masked whole): EXTRA_VALUES
    and this environment's secret values. Read it once and pass it as ``masks=`` to
    ``redact_text`` / ``redact_obj`` to redact many texts against one reading of the environment."""
    return sorted({v for v in set(extra_values) | secret_values() if v and maskable(v)}, key=len, reverse=True)


def redact_text(text: str, extra_values=(), masks=None) -> str:
    """TEXT with every value to mask (MASKS, from ``mask_values``; default: read now) and every
    secret-looking value pattern replaced by MASK."""
    for v in mask_values(extra_values) if masks is None else masks:
        text = text.replace(v, MASK)
    for rx in SECRET_VALUE_RES:
        text = rx.sub(MASK, text)
    return text


def redact_obj(obj, extra_values=(), masks=None):
    """Redact every string in a JSON-like object; the environment is read once per call (or
    never: MASKS given, see ``mask_values``)."""
    masks = mask_values(extra_values) if masks is None else masks
    if isinstance(obj, str):
        return redact_text(obj, masks=masks)
    if isinstance(obj, dict):
        return {k: (MASK if isinstance(v, str) and is_secret_name(str(k)) and v else redact_obj(v, masks=masks))
                for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [redact_obj(v, masks=masks) for v in obj]
    return obj
