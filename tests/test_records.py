"""The manifest and the journal as typed records: old trees keep reading, and writing
them back gives the very bytes the release before the typed records wrote.

``tests/state_records/`` holds a manifest and two journals (an apply's and a revert's)
written by vllm-codemod at c18e8d0, before the records were typed, on a copy of the
corex-0.8.3 fixture patched with ``--v2-threshold 4096 --tuning FILE`` (so every field
is there: patched files, added files, saved bytecode, created directories, the tuning
record).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_codemod.discovery import VllmTree
from vllm_codemod.engine.journal import Journal
from vllm_codemod.engine.records import Manifest, RecordedOptions
from vllm_codemod.engine.statedir import StateDir
from vllm_codemod.errors import ManifestError

DATA = Path(__file__).parent / "state_records"


@pytest.fixture
def state(tmp_path) -> StateDir:
    (tmp_path / "vllm" / ".vllm-codemod").mkdir(parents=True)
    return StateDir(VllmTree(root=tmp_path / "vllm", base=tmp_path))


def test_a_manifest_written_before_reads_and_dumps_the_same_bytes(state):
    data = (DATA / "manifest.json").read_bytes()
    state.manifest_path.write_bytes(data)
    manifest = state.load_manifest()
    assert manifest.files["vllm/_custom_ops.py"].transforms == ["paged-attention-v2"]
    assert manifest.options.values["v2_threshold"] == 4096
    assert manifest.options.tuning_sha256 is not None
    assert manifest.bytecode and manifest.created_dirs == ["vllm/_codemod_kernels"]
    assert manifest.dump() == data


@pytest.mark.parametrize("name", ["journal-apply.json", "journal-revert.json"])
def test_a_journal_written_before_reads_and_dumps_the_same_bytes(state, name):
    data = (DATA / name).read_bytes()
    state.journal_path.write_bytes(data)
    journal = Journal.load(state)
    assert journal.op == name[len("journal-") : -len(".json")]
    assert {s.kind for s in journal.steps} <= {"write", "remove", "rmdir"}
    assert (journal.manifest is None) == (journal.op == "revert")
    assert journal.dump() == data


def test_a_manifest_from_an_older_release_keeps_what_it_did_not_write(state):
    """Absent keys stay absent ("no tuning recorded" is not "tuning: none")."""
    state.manifest_path.write_text('{"format": 1, "files": {}, "options": {"num_warps": 2}}')
    manifest = state.load_manifest()
    assert manifest.options == RecordedOptions(values={"num_warps": 2})
    assert not manifest.options.has_tuning
    assert manifest.to_json()["options"] == {"num_warps": 2}


@pytest.mark.parametrize(
    "text, message",
    [
        ('{"format": 2, "files": {"/etc/passwd": {}}}', "not a plain relative path"),
        ('{"format": 2, "added": {"vllm/../x.py": {}}}', "not a plain relative path"),
        ('{"format": 2, "options": {"only": "all"}}', "bad options.only"),
        ('{"format": 9}', "manifest format 9"),
    ],
)
def test_untrusted_manifests_are_refused_in_one_place(state, text, message):
    state.manifest_path.write_text(text)
    with pytest.raises(ManifestError, match=message):
        Manifest.load(state.tree, state.manifest_path)


def test_a_journal_step_outside_the_tree_is_refused(state):
    state.journal_path.write_text(
        '{"op": "apply", "manifest": null, "steps": '
        '[{"kind": "write", "path": "vllm/x.py", "source": "../../etc/passwd", '
        '"sha256": "00", "mode": null}]}'
    )
    with pytest.raises(ManifestError, match="bad source"):
        Journal.load(state)


def test_a_forced_version_round_trips_and_is_absent_otherwise(state):
    """``apply --force`` records the version it accepted; without it the key is absent,
    so a manifest written without force keeps the bytes it had before."""
    data = (DATA / "manifest.json").read_bytes()
    state.manifest_path.write_bytes(data)
    manifest = state.load_manifest()
    assert manifest.forced_version is None and b"forced_version" not in data
    manifest.forced_version = "0.12.0+corex.5"
    dumped = manifest.dump()
    assert b'"forced_version": "0.12.0+corex.5"' in dumped
    state.manifest_path.write_bytes(dumped)
    again = state.load_manifest()
    assert again.forced_version == "0.12.0+corex.5" and again.dump() == dumped
    state.manifest_path.write_text('{"format": 2, "forced_version": 12}')
    with pytest.raises(ManifestError, match="bad forced_version"):
        state.load_manifest()
