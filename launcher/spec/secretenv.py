"""Secret-looking variables written under ``env:`` are treated as ``secrets:``.

``env: {AWS_SECRET_ACCESS_KEY: ...}`` would otherwise be written in plain text into the
state store (the spec's text), the job script (``export AWS_SECRET_ACCESS_KEY=...``) and
SkyPilot's task. Instead, at launch:

* the key moves from ``env`` to ``secrets``, so every backend delivers it the way it
  delivers secrets (the launcher's environment on this machine and on a login node,
  sbatch's stdin over SSH, SkyPilot's in-memory secrets), never through a file;
* its value is put into this process's environment for the submission;
* the spec text kept in the state store (and in RUN.json) has the value replaced by
  ``PLACEHOLDER``: a later resubmission (``launcher watch``) takes the value from *its*
  environment, exactly like any other secret;
* ``validate``, ``render`` and ``launch`` warn: move it to ``secrets:``.

A key looks secret by ``launcher.core.redact.is_secret_name`` (``*TOKEN*``, ``*SECRET*``,
``*PASSWORD*``, ``*CREDENTIAL*``, ``*_KEY`` ...): the same rule that masks it in records.
"""

from __future__ import annotations

import os
from typing import Optional

import yaml

from launcher.core.redact import is_secret_name

PLACEHOLDER = "<secret: taken from the launcher's environment>"


def secret_env_keys(spec) -> list[str]:
    return [k for k in spec.env if is_secret_name(k)]


def warnings(spec) -> list[str]:
    keys = secret_env_keys(spec)
    if not keys:
        return []
    one = len(keys) == 1
    names = ", ".join(keys)
    return [f"env {names} {'looks like a secret' if one else 'look like secrets'}: passed the way secrets: are "
            f"(never written to the state store or the job script). Move {'it' if one else 'them'} to "
            f"`secrets: [{names}]` and export {'its value' if one else 'their values'}: `launcher watch` needs "
            f"{'it' if one else 'them'} in its environment to resubmit"]


def lift(spec):
    """(spec with the secret-looking env keys moved to secrets, {key: value given in the spec}).
    A value that is already the PLACEHOLDER (a stored spec) is not returned. Pure."""
    keys = secret_env_keys(spec)
    if not keys:
        return spec, {}
    values = {k: spec.env[k] for k in keys if spec.env[k] != PLACEHOLDER}
    env = {k: v for k, v in spec.env.items() if k not in keys}
    secrets = list(spec.secrets) + [k for k in keys if k not in spec.secrets]
    return spec.model_copy(update={"env": env, "secrets": secrets}), values


def for_launch(spec, spec_text: str, environ=None):
    """Lift SPEC for a launch: the values go into ENVIRON (os.environ) for the backends'
    submit, and the returned text has them replaced by PLACEHOLDER. -> (spec, text)."""
    lifted, values = lift(spec)
    if values:
        (os.environ if environ is None else environ).update(values)
    return lifted, scrub_text(spec_text, values) if values else spec_text


def scrub_text(text: str, values: dict) -> str:
    """TEXT (a YAML spec) with the values of ``env.<key>`` for every key of VALUES replaced by
    PLACEHOLDER, edited in place so comments and layout stay; where the YAML is too unusual to
    edit in place (aliases, merges), the parsed document re-dumped. Never returns a text
    that still holds one of the values under its key."""
    edited = _edit_in_place(text, values)
    if edited is not None and _clean(edited, values):
        return edited

    data = yaml.safe_load(text) or {}
    env = dict(data.get("env") or {})
    for k in values:
        if k in env:
            env[k] = PLACEHOLDER
    data["env"] = env
    return yaml.safe_dump(data, sort_keys=False)


def _edit_in_place(text: str, values: dict) -> Optional[str]:
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    if not isinstance(root, yaml.MappingNode):
        return None
    spans = []
    for knode, vnode in root.value:
        if getattr(knode, "value", None) != "env" or not isinstance(vnode, yaml.MappingNode):
            continue
        for ek, ev in vnode.value:
            if getattr(ek, "value", None) in values and isinstance(ev, yaml.ScalarNode):
                start, end = ev.start_mark.index, ev.end_mark.index
                tail = "\n" if text[start:end].endswith("\n") else ""
                spans.append((start, end, tail))
    out = text
    for start, end, tail in sorted(spans, reverse=True):
        out = out[:start] + '"' + PLACEHOLDER + '"' + tail + out[end:]
    return out


def _clean(text: str, values: dict) -> bool:
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        return False
    env = (data or {}).get("env") if isinstance(data, dict) else None
    if not isinstance(env, dict):
        return False
    return all(env.get(k) == PLACEHOLDER for k in values)
