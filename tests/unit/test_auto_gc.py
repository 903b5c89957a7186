"""checkpoint.keep is enforced by the job itself: after each commit the job-side helper
keeps $LAUNCHER_CKPT_KEEP committed checkpoints (never the newest)."""

from launcher import jobside
from launcher.checkpoint import open_store, scan


def test_saves_keep_only_the_last_n_committed(tmp_path, monkeypatch):
    root = tmp_path / "ck"
    monkeypatch.setenv("LAUNCHER_CKPT_ROOT", str(root))
    monkeypatch.setenv("LAUNCHER_ATTEMPT", "1")
    monkeypatch.setenv("LAUNCHER_CKPT_KEEP", "2")
    monkeypatch.delenv("LAUNCHER_BACKEND", raising=False)
    for step in (10, 20, 30, 40):
        with jobside.save(step) as d:
            __import__("pathlib").Path(d, "w.bin").write_bytes(b"x")
    committed = sorted(e.step for e in scan(open_store(str(root))) if e.committed)
    assert committed == [30, 40]


def test_without_keep_nothing_is_collected(tmp_path, monkeypatch):
    root = tmp_path / "ck"
    monkeypatch.setenv("LAUNCHER_CKPT_ROOT", str(root))
    monkeypatch.setenv("LAUNCHER_ATTEMPT", "1")
    monkeypatch.delenv("LAUNCHER_CKPT_KEEP", raising=False)
    for step in (1, 2, 3):
        with jobside.save(step) as d:
            __import__("pathlib").Path(d, "w.bin").write_bytes(b"x")
    assert len([e for e in scan(open_store(str(root))) if e.committed]) == 3
