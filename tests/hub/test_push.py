"""`push_model_folder` / `vaswani push` / `train.py --push_to_hub`: one commit with every file of the model folder and our model card, checked
offline at the network boundary (`HfApi.create_repo` and `HfApi.create_commit` are replaced by recorders). The
uploaded files then load in a fresh process without this package, with `trust_remote_code=True`, and translate.
Bad repo ids and incomplete folders fail before any network call."""

import json
import logging
import re
import shutil
from pathlib import Path

import pytest
from huggingface_hub import HfApi, RepoUrl
from test_pipeline_vaswani import (  # noqa: F401  (one_torch_thread is an autouse fixture)
    SENTENCES,
    one_torch_thread,
    reference_translations,
    trained_model_and_tokenizer,
)

from vaswani.cli import main
from vaswani.errors import PushError
from vaswani.hub.model_card import public_run_args, write_model_card
from vaswani.hub.push import push_model_folder

REPO_ID = "someone/tiny-vaswani"
CODE_FILES = {"configuration_vaswani.py", "modeling_vaswani.py", "generation_vaswani.py", "pipeline_vaswani.py"}
RUN_ARGS = {
    "source_lang": "en", "target_lang": "de", "dataset_name": "demo", "hub_model_id": REPO_ID, "push_to_hub": True,
    "num_beams": 4, "length_penalty": 0.6, "max_tokens": 4096, "gradient_accumulation_steps": 1,
    "max_train_steps": 10, "adam_beta1": 0.9, "adam_beta2": 0.98, "adam_epsilon": 1e-9, "lr_scheduler": "inverse_sqrt",
    "warmup_steps": 4000,
}  # fmt: skip
RESULTS = {
    "step": 10,
    "test": {"bleu": 12.34, "chrf": 40.5, "bleu_signature": "nrefs:1|case:mixed|tok:13a|smooth:exp|version:2.4.0",
             "chrf_signature": "nrefs:1|case:mixed|nc:6|nw:0|space:no|version:2.4.0",
             "examples": [{"source": "the cat sat on the mat"}]},
}  # fmt: skip


class HubRecorder:
    """Stands in for the Hub: records `create_repo` and `create_commit` calls and the bytes of every file."""

    def __init__(self, monkeypatch):
        self.repos, self.commits = [], []
        recorder = self

        def create_repo(api, repo_id, *, private=False, exist_ok=False, repo_type=None, **kwargs):
            recorder.repos.append({"repo_id": repo_id, "private": private, "exist_ok": exist_ok, "type": repo_type})
            return RepoUrl(f"https://huggingface.co/{repo_id if '/' in repo_id else 'me/' + repo_id}")

        def create_commit(api, repo_id, operations, *, commit_message, repo_type=None, **kwargs):
            files = {}
            for operation in operations:
                with operation.as_file() as stream:
                    files[operation.path_in_repo] = stream.read()
            recorder.commits.append({"repo_id": repo_id, "message": commit_message, "files": files})
            return f"https://huggingface.co/{repo_id}/commit/0"

        monkeypatch.setattr(HfApi, "create_repo", create_repo)
        monkeypatch.setattr(HfApi, "create_commit", create_commit)

    @property
    def calls(self) -> int:
        return len(self.repos) + len(self.commits)


@pytest.fixture
def hub(monkeypatch):
    return HubRecorder(monkeypatch)


def write_final_model_folder(folder: Path, **save_kwargs) -> set[str]:
    """The output folder of a finished train.py run, written the way train.py writes it, with training leftovers
    (checkpoints, tracker logs, a stale temporary folder). Returns the names of the files that belong on the Hub."""
    model, tokenizer = trained_model_and_tokenizer()
    model.save_pretrained(folder, **save_kwargs)
    tokenizer_files = {Path(name).name for name in tokenizer.save_pretrained(folder)}
    write_model_card(folder, args=RUN_ARGS, results=RESULTS, config=model.config)
    (folder / "results.json").write_text(json.dumps(RESULTS, indent=2))
    (folder / "run_args.json").write_text(json.dumps(RUN_ARGS, indent=2))
    (folder / "metrics.jsonl").write_text('{"step": 10, "loss": 3.2}\n')
    leftovers = [
        "checkpoints/step-00000010/model.safetensors", "checkpoints/step-00000010/checkpoint.json",
        "logs/events.out.tfevents.1", ".tmp-average-x/model.safetensors", "__pycache__/x.pyc",
    ]  # fmt: skip
    for leftover in leftovers:
        (folder / leftover).parent.mkdir(parents=True, exist_ok=True)
        (folder / leftover).write_bytes(b"not for the Hub")
    weights = {path.name for path in folder.glob("model*.safetensors*")}
    training = {"README.md", "results.json", "run_args.json", "metrics.jsonl"}
    return {"config.json", "generation_config.json", *weights, *tokenizer_files, *CODE_FILES, *training}


@pytest.fixture
def final_folder(tmp_path):
    folder = tmp_path / "run"
    expected = write_final_model_folder(folder)
    return folder, expected


# ---------------------------------------------------------------------------------------------------------------
# One commit with every file and our card
# ---------------------------------------------------------------------------------------------------------------
def test_push_uploads_every_file_in_one_commit_with_our_card(final_folder, hub):
    folder, expected = final_folder
    url = push_model_folder(folder, REPO_ID)  # as train.py calls it at the end of a run
    assert url == f"https://huggingface.co/{REPO_ID}"
    assert hub.repos == [{"repo_id": REPO_ID, "private": False, "exist_ok": True, "type": "model"}]
    assert len(hub.commits) == 1
    commit = hub.commits[0]
    assert commit["repo_id"] == REPO_ID and commit["message"] == "Upload run (vaswani)"
    assert set(commit["files"]) == expected
    for name, content in commit["files"].items():
        if name == "run_args.json":  # published with local paths reduced to file names (none here)
            assert json.loads(content) == json.loads((folder / name).read_bytes())
        else:
            assert content == (folder / name).read_bytes(), name
    card = commit["files"]["README.md"].decode()
    assert "pipeline_tag: translation" in card and f'from_pretrained("{REPO_ID}", trust_remote_code=True)' in card
    assert "12.34" in card and "This is the model card of a 🤗 transformers model" not in card
    config = json.loads(commit["files"]["config.json"])
    assert "AutoModelForSeq2SeqLM" in config["auto_map"] and "vaswani-translation" in config["custom_pipelines"]


def test_a_folder_saved_by_another_version_gets_the_installed_modeling_code_on_the_hub(final_folder, hub, caplog):
    """The code vaswani runs the model with is what trust_remote_code loads from the Hub (a folder saved before
    transformers 5.24's cache rename carries code that decodes wrongly under it); the folder itself is left alone."""
    from transformers import AutoModelForSeq2SeqLM

    import modeling_vaswani.generation_vaswani

    folder, expected = final_folder
    old = folder / "generation_vaswani.py"
    old.write_text(old.read_text(encoding="utf-8") + "\n# an older vaswani's copy\n", encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="vaswani.hub.push"):
        push_model_folder(folder, REPO_ID)
    files = hub.commits[0]["files"]
    assert set(files) == expected
    assert files["generation_vaswani.py"] == Path(modeling_vaswani.generation_vaswani.__file__).read_bytes()
    assert old.read_text(encoding="utf-8").endswith("# an older vaswani's copy\n")  # not rewritten
    assert "the installed vaswani's generation_vaswani.py, not the folder's" in caplog.text
    assert "modeling_vaswani.py" not in caplog.text  # the copies that are the same are not named
    # the remedy docs/training.md gives for the folder itself: re-save it with the package imported
    AutoModelForSeq2SeqLM.from_pretrained(folder).save_pretrained(folder)
    assert old.read_bytes() == Path(modeling_vaswani.generation_vaswani.__file__).read_bytes()


def test_a_folder_saved_by_this_version_uploads_without_a_warning(final_folder, hub, caplog):
    folder, _ = final_folder
    with caplog.at_level(logging.WARNING, logger="vaswani.hub.push"):
        push_model_folder(folder, REPO_ID)
    assert "not the folder's" not in caplog.text


def train_and_push(tmp_path: Path) -> tuple[Path, dict]:
    """A two-step train.py run (in this process) with --push_to_hub, leaving checkpoints and tensorboard logs."""
    from conftest import train_in_process
    from test_options import QUIET, TINY_MODEL

    from vaswani.data.demo import write_demo_files

    data = write_demo_files(tmp_path / "data", num_train=40, num_validation=4, num_test=4)
    out = tmp_path / "run"
    results = train_in_process(
        ["--train_file", str(data["train"]), "--validation_file", str(data["validation"]), "--test_file",
         str(data["test"]), "--cache_dir", str(tmp_path / "cache"), *TINY_MODEL, *QUIET, "--vocab_size", "400",
         "--max_tokens", "400", "--max_source_length", "48", "--max_target_length", "48", "--max_train_steps", "2",
         "--warmup_steps", "1", "--checkpoint_steps", "1", "--average_checkpoints", "2", "--average_window", "1", "--final_model", "average",
         "--report_to",
         "tensorboard", "--push_to_hub", "--hub_model_id", REPO_ID, "--output_dir", str(out)]
    )  # fmt: skip
    return out, results


def test_train_py_pushes_its_final_model_folder(tmp_path, hub):
    out, results = train_and_push(tmp_path)
    assert "push_error" not in results
    assert hub.repos == [{"repo_id": REPO_ID, "private": False, "exist_ok": True, "type": "model"}]
    assert len(hub.commits) == 1
    files = hub.commits[0]["files"]
    # Every file of the final folder, byte for byte; none of the checkpoints or tracker logs.
    on_disk = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    assert any(name.startswith("checkpoints/") for name in on_disk) and any(n.startswith("logs/") for n in on_disk)
    assert set(files) == {name for name in on_disk if not name.startswith(("checkpoints/", "logs/"))}
    assert {"model.safetensors", "config.json", "tokenizer.json", "README.md", "results.json"} | CODE_FILES <= set(
        files
    )
    for name, content in files.items():
        if name != "run_args.json":
            assert content == (out / name).read_bytes(), name
    # the training record is published with local paths reduced to file names (no path of the trainer's machine)
    local, published = json.loads((out / "run_args.json").read_text()), json.loads(files["run_args.json"])
    assert published == public_run_args(local) and published["train_file"] == Path(local["train_file"]).name
    assert str(tmp_path) not in files["run_args.json"].decode()
    card = files["README.md"].decode()
    assert f'from_pretrained("{REPO_ID}", trust_remote_code=True)' in card  # the card written for this repo
    assert json.loads(files["results.json"])["averaged_checkpoints"] == ["step-00000001", "step-00000002"]


def test_train_py_keeps_the_model_and_says_how_to_retry_when_the_push_fails(tmp_path, caplog):
    """No recorder: offline, the upload fails. The run still ends with its model saved, and reports the failure."""
    with caplog.at_level("ERROR", logger="train"):
        out, results = train_and_push(tmp_path)
    assert "offline" in results["push_error"]
    assert (out / "model.safetensors").exists() and (out / "README.md").exists()
    assert f"retry with: vaswani push --model {out} --hub_model_id {REPO_ID}" in caplog.text


def test_a_sharded_model_uploads_every_shard(tmp_path, hub):
    folder = tmp_path / "sharded"
    expected = write_final_model_folder(folder, max_shard_size="50KB")
    shards = sorted(path.name for path in folder.glob("model-*.safetensors"))
    assert len(shards) > 1 and "model.safetensors.index.json" in expected
    push_model_folder(folder, REPO_ID, private=True, commit_message="sharded")
    assert hub.repos[0]["private"] is True and hub.commits[0]["message"] == "sharded"
    assert set(hub.commits[0]["files"]) == expected
    (folder / shards[-1]).unlink()
    with pytest.raises(PushError, match=f"lists shard\\(s\\) that are missing: {shards[-1]}"):
        push_model_folder(folder, REPO_ID)
    assert len(hub.commits) == 1


def test_a_folder_without_a_card_gets_ours_rendered_for_the_repo(final_folder, hub):
    folder, expected = final_folder
    (folder / "README.md").unlink()
    push_model_folder(folder, "someone/another-name")
    files = hub.commits[0]["files"]
    assert set(files) == expected
    card = files["README.md"].decode()
    assert 'from_pretrained("someone/another-name"' in card and "pipeline_tag: translation" in card
    assert not (folder / "README.md").exists()  # the folder itself is left as it was


@pytest.mark.slow
def test_the_uploaded_files_load_and_translate_in_a_fresh_process(final_folder, hub, tmp_path, isolated_python,
                                                                 monkeypatch):  # fmt: skip
    folder, _ = final_folder
    push_model_folder(folder, REPO_ID)
    downloaded = tmp_path / "downloaded"
    for name, content in hub.commits[0]["files"].items():
        (downloaded / name).parent.mkdir(parents=True, exist_ok=True)
        (downloaded / name).write_bytes(content)
    model, tokenizer = trained_model_and_tokenizer()
    sentences = [sentence for sentence in SENTENCES if sentence.strip()]
    expected = reference_translations(model, tokenizer, SENTENCES)
    paper = reference_translations(model, tokenizer, SENTENCES, paper_decoding=True)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    result = isolated_python(
        f"""
        import json
        from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

        folder = {str(downloaded)!r}
        model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        generated = [
            tokenizer.decode(model.generate(**tokenizer([s], return_tensors="pt"))[0], skip_special_tokens=True)
            for s in {sentences!r}
        ]
        translate = pipeline(model=folder, trust_remote_code=True, device="cpu")
        print(json.dumps({{
            "model": type(model).__module__,
            "pipeline": type(translate).__module__,
            "generated": generated,
            "pipeline_list": translate({SENTENCES!r}, batch_size=3),
            "pipeline_single": translate({SENTENCES[0]!r}),
            "paper": translate({SENTENCES!r}, batch_size=4, paper_decoding=True),
        }}))
        """
    )
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout.strip().splitlines()[-1])
    assert got["model"].startswith("transformers_modules.") and got["model"].endswith(".modeling_vaswani")
    assert got["pipeline"].startswith("transformers_modules.") and got["pipeline"].endswith(".pipeline_vaswani")
    assert got["generated"] == [text for text, sentence in zip(expected, SENTENCES, strict=True) if sentence.strip()]
    assert got["pipeline_list"] == expected and got["pipeline_single"] == expected[0]
    assert got["paper"] == paper


# ---------------------------------------------------------------------------------------------------------------
# Bad input fails before any network call
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("repo_id", ["my repo", "a/b/c", "-name", "name.", "", "x" * 97])
def test_invalid_repo_ids_fail_before_any_network_call(final_folder, hub, repo_id):
    folder, _ = final_folder
    with pytest.raises(PushError, match=f"{re.escape(repr(repo_id))} is not a valid repo id: use NAME or OWNER/NAME"):
        push_model_folder(folder, repo_id)
    assert hub.calls == 0


def _remove(name):
    def edit(folder: Path) -> None:
        path = folder / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()

    return edit


def _drop_from_config(key):
    def edit(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        del config[key]
        (folder / "config.json").write_text(json.dumps(config))

    return edit


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_remove(""), "no such model folder"),
        (_remove("config.json"), r"not a model folder \(no config.json\)"),
        # a run folder (checkpoints/) without its final model: how to make one
        (_remove("model.safetensors"), r"is a training run without its final model yet .* vaswani average --run_dir"),
        (_remove("tokenizer.json"), r"has no tokenizer \(tokenizer.json\)"),
        (_remove("pipeline_vaswani.py"), "lacks pipeline_vaswani.py, which loading with trust_remote_code=True needs"),
        (_drop_from_config("custom_pipelines"), "lacks the auto_map / custom_pipelines entries"),
    ],
    ids=["missing", "no-config", "no-weights", "no-tokenizer", "no-pipeline-file", "no-custom-pipelines"],
)
def test_incomplete_folders_fail_before_any_network_call(final_folder, hub, edit, message):
    folder, _ = final_folder
    edit(folder)
    with pytest.raises(PushError, match=message):
        push_model_folder(folder, REPO_ID)
    assert hub.calls == 0


def test_a_refusing_hub_is_a_clear_error(final_folder):
    folder, _ = final_folder  # no recorder: the session is offline (HF_HUB_OFFLINE=1)
    with pytest.raises(PushError, match=f"uploading .*run to {REPO_ID} failed: .*offline"):
        push_model_folder(folder, REPO_ID)


# ---------------------------------------------------------------------------------------------------------------
# vaswani push
# ---------------------------------------------------------------------------------------------------------------
def test_vaswani_push(final_folder, hub, capsys):
    folder, expected = final_folder
    assert main(["push", "--model", str(folder), "--hub_model_id", REPO_ID, "--private"]) == 0
    assert capsys.readouterr().out == f"pushed {folder} to https://huggingface.co/{REPO_ID}\n"
    assert hub.repos[0]["private"] is True and set(hub.commits[0]["files"]) == expected


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--hub_model_id", "my repo"], "error: 'my repo' is not a valid repo id"),
        (["--hub_model_id", "a/b/c"], "error: 'a/b/c' is not a valid repo id"),
        (["--hub_model_id", REPO_ID, "--model", "{tmp}/nowhere"], "error: no such model folder"),
        (["--hub_model_id", REPO_ID, "--model", "{tmp}"], "error: .* is not a model folder"),
        (["--model", "{folder}"], "the following arguments are required: --hub_model_id"),
    ],
)
def test_vaswani_push_errors(final_folder, hub, tmp_path, capsys, arguments, message):
    folder, _ = final_folder
    arguments = [argument.format(tmp=tmp_path, folder=folder) for argument in arguments]
    if "--model" not in arguments:
        arguments += ["--model", str(folder)]
    assert main(["push", *arguments]) == 2
    err = capsys.readouterr().err
    assert re.search(message, err) and "Traceback" not in err
    assert hub.calls == 0


def test_published_files_hold_no_local_paths(tmp_path, hub):
    """run_args.json and the card on the Hub name local files by their last part only (issue 11, item 10)."""
    folder = tmp_path / "run"
    write_final_model_folder(folder)
    home = str(tmp_path / "home" / "alice")
    local = {"train_file": f"{home}/data/train.jsonl", "validation_file": f"{home}/data/valid.jsonl",
             "test_file": None, "tokenizer": f"{home}/tok", "output_dir": f"{home}/runs/base",
             "config": f"{home}/base.yaml", "model_name_or_path": f"{home}/init", "cache_dir": f"{home}/.cache",
             "dataset_name": None}  # fmt: skip
    (folder / "run_args.json").write_text(json.dumps({**RUN_ARGS, **local}))
    (folder / "README.md").unlink()  # rendered by push, from run_args.json
    push_model_folder(folder, REPO_ID)
    files = hub.commits[0]["files"]
    for name in ("run_args.json", "README.md"):
        assert home.encode() not in files[name] and b"alice" not in files[name], name
    published = json.loads(files["run_args.json"])
    assert published["train_file"] == "train.jsonl" and published["tokenizer"] == "tok"
    assert published["output_dir"] == "base" and published["test_file"] is None
    assert "train.jsonl" in files["README.md"].decode()  # the card still says what the data was
    assert home in (folder / "run_args.json").read_text()  # the local record keeps the full paths (resume needs them)
    # the card train.py writes into the folder holds no paths either
    write_model_card(folder, args={**RUN_ARGS, **local})
    assert home not in (folder / "README.md").read_text()


def test_the_code_files_are_derived_from_what_save_pretrained_copies(tmp_path):
    """One list of remote-code files (`vaswani.model_folder.code_files`), derived from the modeling package: it is
    exactly the Python files a saved model folder holds, the ones a push requires."""
    from conftest import tiny_model

    from vaswani.model_folder import code_files

    tiny_model().save_pretrained(tmp_path)
    assert set(code_files()) == {path.name for path in tmp_path.glob("*.py")} == CODE_FILES


# ---------------------------------------------------------------------------------------------------------------
# A CTranslate2 export: pushed with a card of its own
# ---------------------------------------------------------------------------------------------------------------
def test_a_ctranslate2_export_is_pushed_with_its_own_card_and_translates_from_the_uploaded_files(
    final_folder, hub, tmp_path
):
    pytest.importorskip("ctranslate2")
    from huggingface_hub import ModelCard

    from vaswani.export.ctranslate2 import export_ctranslate2
    from vaswani.inference.translator import Translator

    folder, _ = final_folder
    export = export_ctranslate2(folder, tmp_path / "ct2", quantization="int8")
    assert main(["push", "--model", str(export), "--hub_model_id", REPO_ID]) == 0
    [commit] = hub.commits
    files = commit["files"]
    assert {"model.bin", "config.json", "shared_vocabulary.json", "tokenizer.json", "vaswani_ctranslate2.json",
            "run_args.json", "README.md"} <= files.keys()  # fmt: skip
    for name, content in files.items():
        if name not in ("README.md", "run_args.json"):
            assert content == (export / name).read_bytes(), name
    assert str(tmp_path) not in files["run_args.json"].decode()  # local paths reduced to file names
    card = ModelCard(files["README.md"].decode())
    assert card.data.library_name == "ctranslate2" and card.data.pipeline_tag == "translation"
    assert {"ctranslate2", "int8", "translation"} <= set(card.data.tags) and card.data.language == ["en", "de"]
    assert f"hf download {REPO_ID} --local-dir tiny-vaswani" in card.text
    assert "vaswani translate --model tiny-vaswani" in card.text and "No evaluation results" in card.text
    assert "| Architecture | encoder-decoder Transformer, 2 encoder layers + 2 decoder layers |" in card.text
    # what was uploaded translates as the export does, the way the card says
    downloaded = tmp_path / "tiny-vaswani"
    downloaded.mkdir()
    for name, content in files.items():
        (downloaded / name).write_bytes(content)
    assert Translator(downloaded).translate(SENTENCES) == Translator(export).translate(SENTENCES)


@pytest.mark.parametrize("missing", ["model.bin", "tokenizer.json", "vaswani_ctranslate2.json"])
def test_an_incomplete_export_fails_before_any_network_call(final_folder, hub, tmp_path, missing):
    pytest.importorskip("ctranslate2")
    from vaswani.export.ctranslate2 import export_ctranslate2

    folder, _ = final_folder
    export = export_ctranslate2(folder, tmp_path / "ct2")
    (export / missing).unlink()
    lacks = {"model.bin": "model.bin", "tokenizer.json": "a tokenizer"}
    expected = (f"is an incomplete CTranslate2 export \\(it lacks {lacks[missing]}" if missing in lacks else
                "holds a CTranslate2 model \\(model.bin and CTranslate2's config.json\\) without vaswani's record")  # fmt: skip
    with pytest.raises(PushError, match=expected):
        push_model_folder(export, REPO_ID)
    assert hub.calls == 0
