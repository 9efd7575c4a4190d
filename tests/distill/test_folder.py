"""vaswani/distill/folder.py: a distillation writes only into a new, empty or earlier distillation's folder, and
replaces its exports whole, never anything it did not write."""

import json

import pytest

from vaswani.distill.folder import ARGS_FILE, DistillFolder, export_replacing, open_distill_folder
from vaswani.errors import UsageError


def test_a_new_empty_or_earlier_distillations_folder_is_opened_and_another_refused(tmp_path):
    folder = open_distill_folder(tmp_path / "new", {"stage": "all", "output_dir": tmp_path / "new"})
    assert json.loads(folder.args_file.read_text()) == {"stage": "all", "output_dir": str(tmp_path / "new")}
    leftover = folder.root / ".tmp-export-abc"  # what a killed export left
    (leftover / "new").mkdir(parents=True)
    (folder.root / "notes.txt").write_text("mine")
    open_distill_folder(folder.root, {"stage": "train"})
    assert not leftover.exists() and (folder.root / "notes.txt").read_text() == "mine"
    (tmp_path / "empty").mkdir()
    open_distill_folder(tmp_path / "empty", {})
    other = tmp_path / "other"
    other.mkdir()
    (other / "model.safetensors").write_text("not ours")
    with pytest.raises(UsageError, match=f"holds files and no distillation \\({ARGS_FILE} is missing\\); nothing"):
        open_distill_folder(other, {})
    assert [p.name for p in other.iterdir()] == ["model.safetensors"]
    (tmp_path / "file").write_text("x")
    with pytest.raises(UsageError, match="is a file; give a folder"):
        open_distill_folder(tmp_path / "file", {})


def test_an_export_is_replaced_whole_and_anything_else_is_left_alone(model_folder, tmp_path):
    folder = DistillFolder(tmp_path)
    export_replacing(model_folder, folder.student_export, "int8")
    info = folder.student_export / "vaswani_ctranslate2.json"
    assert json.loads(info.read_text())["quantization"] == "int8"
    export_replacing(model_folder, folder.student_export, "int16")
    assert json.loads(info.read_text())["quantization"] == "int16"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["student-ct2"]  # no staging folder left
    mine = tmp_path / "teacher-ct2"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    with pytest.raises(UsageError, match="exists and is not a CTranslate2 export: nothing was replaced"):
        export_replacing(model_folder, mine, "int8")
    assert [p.name for p in mine.iterdir()] == ["notes.txt"]


@pytest.mark.parametrize("kill_at", range(2))
def test_an_export_killed_while_it_replaces_the_old_one_is_finished_by_the_next_run(model_folder, tmp_path,
                                                                                    monkeypatch, kill_at):  # fmt: skip
    """A kill at either rename of the swap (the old export aside, the new one in): the next `export_replacing` (the
    next run of the stage) first puts the old export or the new one back in place, then replaces it whole, and
    nothing of the swap is left beside it."""
    from vaswani import model_folder as model_folder_module

    folder = DistillFolder(tmp_path)
    export_replacing(model_folder, folder.student_export, "int8")
    real_replace, calls = model_folder_module.os.replace, []

    def dying_replace(source, target):
        calls.append(source)
        if len(calls) == kill_at + 1:
            raise KeyboardInterrupt("killed")  # stands for SIGKILL
        real_replace(source, target)

    monkeypatch.setattr(model_folder_module.os, "replace", dying_replace)
    with pytest.raises(KeyboardInterrupt):
        export_replacing(model_folder, folder.student_export, "int16")
    monkeypatch.setattr(model_folder_module.os, "replace", real_replace)
    export_replacing(model_folder, folder.student_export, "float32")
    info = json.loads((folder.student_export / "vaswani_ctranslate2.json").read_text())
    assert info["quantization"] == "float32" and sorted(p.name for p in tmp_path.iterdir()) == ["student-ct2"]
