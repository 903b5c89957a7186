"""What launch() keeps per process to be fast gives the same answers as computing afresh:
the redaction of unchanged record sections, can() per (class, protocol), comment_text."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from launcher.backend.protocols import can
from launcher.provenance.record import redact_record
from launcher.core.redact import MASK, redact_obj
from launcher.backend.templating import comment_text

SECRET = "s3cr3t-Value-XYZ-123456"


def _doc(run: str, rendered: str) -> dict:
    return {"format": "launcher-run/v1", "run": run,
            "spec": {"text": f"env: {{WANDB_API_KEY: {SECRET}}}\n", "given": {"env": {"WANDB_API_KEY": SECRET}}},
            "rendered": {"text": rendered}, "submitted_by": {"user": "me", "argv": ["launcher", "launch"]},
            "python": {"version": "3.11", "packages_sha256": "x", "packages": ["a==1", f"b=={SECRET}"]},
            "secrets": {"names": [], "set_at_launch": {}}}


def _plain(doc: dict) -> dict:
    """The record redacted the straightforward way: the whole document at once."""
    from launcher.provenance.record import _values_under_secret_keys
    from launcher.core.redact import mask_values

    return redact_obj(doc, masks=mask_values(_values_under_secret_keys(doc, set())))


def test_a_record_is_redacted_as_the_whole_document_would_be_first_time_and_again():
    for run in ("j-1", "j-2", "j-2"):  # the spec section is taken from the per-process memo after the first
        doc = _doc(run, f"export X={SECRET}\n# run {run}\n")
        out = redact_record(doc)
        assert out == _plain(doc)
        assert out["spec"]["given"]["env"]["WANDB_API_KEY"] == MASK and SECRET not in str(out)
        assert out["run"] == run and out["python"]["packages"] == ["a==1", f"b=={MASK}"]


def test_a_new_secret_in_the_environment_reaches_an_unchanged_section(monkeypatch):
    doc = {"run": "j-1", "submitted_by": {"user": "me", "argv": ["x", "other-Secret-9876543"]}}
    assert redact_record(doc)["submitted_by"]["argv"][1] == "other-Secret-9876543"
    monkeypatch.setenv("SOME_TOKEN", "other-Secret-9876543")
    assert redact_record(doc)["submitted_by"]["argv"][1] == MASK


@runtime_checkable
class _Pings(Protocol):
    def ping(self) -> str: ...


class _Plain:
    pass


class _Pinger:
    def ping(self) -> str:
        return "pong"


def test_can_answers_per_instance_when_the_class_alone_does_not_decide():
    with_attr = _Plain()
    with_attr.ping = lambda: "pong"
    assert can(with_attr, _Pings) and not can(_Plain(), _Pings) and can(with_attr, _Pings)
    assert can(_Pinger(), _Pings) and can(_Pinger(), _Pings) and can(_Pinger, _Pings)
    assert not can(_Plain, _Pings)


def test_comment_text_keeps_plain_text_and_escapes_the_rest():
    assert comment_text("lr=0.1 batch=32") == "lr=0.1 batch=32"
    assert comment_text("a\nb\tc") == "a\\nb\\tc"
    assert comment_text(12) == "12"
