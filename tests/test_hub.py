"""Publishing to a hub folder: layout, commits, tags, dedup, no pickles, offline loading, errors."""

from __future__ import annotations

import hashlib
import json
import os
import runpy
import shutil
import subprocess
import threading
from pathlib import Path

import pytest
import torch
import yaml
from conftest import BLOCK_MINIGPT, PYTHON, REPO_ROOT, build_tiny_tokenizer, tiny_model
from hub_fixtures import make_run, tree_digest
from huggingface_hub import ModelCard, scan_cache_dir
from safetensors.torch import load_file

from minigpt.errors import MiniGPTUserError
from minigpt.hub import store as hub
from minigpt.hub.loading import ModelNotFoundError, resolve_model
from minigpt.hub.publishing import publish

REPO = "minigpt-test/tiny-shakespeare"
PUSH = REPO_ROOT / "scripts" / "push.py"
PROMPT = "First Citizen:\nBefore we"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt", ".joblib")  # formats that unpickle


def run_script(script: Path, args: list[str], monkeypatch, capsys) -> tuple[int, str, str]:
    """Run a CLI script in this process (as `python script args`); returns (exit code, out, err)."""
    monkeypatch.setattr("sys.argv", [str(script), *args])
    with pytest.raises(SystemExit) as exit_info:
        runpy.run_path(str(script), run_name="__main__")
    out, err = capsys.readouterr()
    return exit_info.value.code, out, err


@pytest.fixture(scope="module")
def published(tmp_path_factory):
    """Two pushes of one repo: v1 from a run folder, v2 from a model folder with new weights, both in
    MiniGPT's own form (remote code); tests/test_publish_stock.py covers the default, stock form."""
    root = tmp_path_factory.mktemp("hub_test")
    tokenizer = build_tiny_tokenizer()
    run = make_run(root, seed=0, tokenizer=tokenizer)
    second = root / "second_model"
    tiny_model(seed=1).save_pretrained(second)
    tokenizer.save_pretrained(second)
    hub_dir = root / "hub"
    first = publish(run, REPO, hub_dir, tag="v1", message="first model", form="minigpt")
    newer = publish(second, REPO, hub_dir, tag="v2", message="retrained", form="minigpt")
    return dict(root=root, run=run, second=second, hub=hub_dir, first=first, newer=newer, tokenizer=tokenizer)


def git_blob_sha1(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def test_two_pushes_make_two_commits_with_refs_history_and_hub_layout(published, monkeypatch, capsys):
    hub_dir, first, newer = published["hub"], published["first"], published["newer"]
    repo = hub_dir / "models--minigpt-test--tiny-shakespeare"
    assert (repo / "refs" / "main").read_text() == newer.commit_id  # raw, no newline: as the hub client reads
    assert (repo / "refs" / "v1").read_text() == first.commit_id
    assert (repo / "refs" / "v2").read_text() == newer.commit_id
    assert newer.parent == first.commit_id and first.parent is None
    assert newer.commit_id == hub.commit_id_for(newer.files, first.commit_id, "retrained")

    expected = {
        "README.md",
        "architecture_minigpt.py",
        "config.json",
        "configuration_minigpt.py",
        "generation_config.json",
        "loss.png",
        "model.safetensors",
        "modeling_minigpt.py",
        "resolved_config.yaml",
        "tokenizer.json",
        "tokenizer_config.json",
    }
    snapshot = repo / "snapshots" / first.commit_id
    assert {p.name for p in snapshot.iterdir()} == expected
    for path in snapshot.iterdir():  # relative links into blobs/, named by the hub's etags
        assert path.is_symlink() and not os.path.isabs(os.readlink(path))
        data = path.read_bytes()
        binary = path.suffix in (".safetensors", ".png")
        assert Path(os.readlink(path)).name == (
            hashlib.sha256(data).hexdigest() if binary else git_blob_sha1(data)
        )
    final = published["run"] / "final"
    assert (snapshot / "model.safetensors").read_bytes() == (final / "model.safetensors").read_bytes()

    info = scan_cache_dir(hub_dir)  # huggingface_hub reads the folder as its own cache
    assert info.warnings == []
    (cached,) = info.repos
    assert cached.repo_id == REPO
    assert {r.commit_hash: set(r.refs) for r in cached.revisions} == {
        first.commit_id: {"v1"},
        newer.commit_id: {"main", "v2"},
    }

    code, out, _ = run_script(
        PUSH, ["--log", "--repo-id", REPO, "--hub-dir", str(hub_dir)], monkeypatch, capsys
    )
    lines = out.strip().splitlines()
    assert code == 0 and len(lines) == 2
    assert lines[0].startswith(newer.commit_id) and lines[0].endswith("retrained") and "v2" in lines[0]
    assert lines[1].startswith(first.commit_id) and lines[1].endswith("first model")


def test_unchanged_files_are_stored_once(published):
    hub_dir, first, newer = published["hub"], published["first"], published["newer"]
    blobs = {p.name for p in (hub_dir / "models--minigpt-test--tiny-shakespeare" / "blobs").iterdir()}
    assert blobs == set(first.files.values()) | set(newer.files.values())
    shared = {name for name in first.files if first.files[name] == newer.files.get(name)}
    assert {"tokenizer.json", "modeling_minigpt.py", "configuration_minigpt.py", "architecture_minigpt.py"} <= shared
    assert first.files["model.safetensors"] != newer.files["model.safetensors"]
    assert len(blobs) < len(first.files) + len(newer.files)

    # Pushing the same folder again changes nothing but can still tag it.
    again = publish(published["second"], REPO, hub_dir, tag="v2-again", message="same again", form="minigpt")
    assert not again.created and again.commit_id == newer.commit_id
    assert hub.resolve_commit(hub_dir, REPO, "v2-again") == newer.commit_id
    assert {p.name for p in (hub_dir / "models--minigpt-test--tiny-shakespeare" / "blobs").iterdir()} == blobs


def test_no_pickle_is_ever_published(published, tmp_path):
    checkpoint = published["run"] / "checkpoint-10"
    source_pickles = [p.name for p in checkpoint.iterdir() if p.suffix in (".bin", ".pt", ".pth")]
    assert len(source_pickles) == 3  # the source really holds Trainer's pickles
    hub_dir = tmp_path / "hub"
    commit = publish(checkpoint, "minigpt-test/from-checkpoint", hub_dir, tag="ckpt")
    assert "trainer_state.json" not in commit.files
    for snapshot in [commit.snapshot_dir(hub_dir, "minigpt-test/from-checkpoint")] + [
        published["hub"] / "models--minigpt-test--tiny-shakespeare" / "snapshots" / c.commit_id
        for c in (published["first"], published["newer"])
    ]:
        for path in snapshot.iterdir():
            assert not path.name.lower().endswith(PICKLE_SUFFIXES), path
            head = path.read_bytes()[:4]
            assert head[:2] != b"PK", path  # torch.save's zip container
            if path.suffix != ".safetensors":  # a safetensors header length may start with 0x80
                assert head[:1] != b"\x80", path  # a pickle protocol marker


def test_model_card_has_metadata_and_body(published):
    snapshot = hub.snapshot_dir(published["hub"], REPO, "v1")
    card = ModelCard.load(snapshot / "README.md")  # parsed the way the hub parses it
    data = card.data.to_dict()
    assert data["library_name"] == "transformers"
    assert data["license"] == "apache-2.0"
    assert "minigpt" in data["tags"] and "datasets" not in data  # a local file is no hub dataset
    metrics = {m["type"]: m["value"] for m in data["model-index"][0]["results"][0]["metrics"]}
    assert metrics == {"loss": 5.1, "perplexity": 164.0, "bits_per_byte": 4.41}  # the step-10 record

    model = tiny_model(seed=0)
    params = sum(p.numel() for p in model.parameters())  # tied head counted once by parameters()
    body = card.text
    assert f"{params:,} parameters" in body
    assert "![training and validation loss](loss.png)" in body
    assert f'AutoModelForCausalLM.from_pretrained("{REPO}", trust_remote_code=True)' in body
    assert f'AutoTokenizer.from_pretrained("{REPO}", trust_remote_code=True)' in body
    # The run folder was saved without a length: the published generation config bounds it by the
    # context, so generate() and pipelines with defaults stop at the last learned position.
    generation_config = json.loads((snapshot / "generation_config.json").read_text())
    assert (generation_config["max_length"], generation_config["eos_token_id"]) == (64, 0)
    assert "| learning_rate | `0.001` |" in body and "| hidden_size | `32` |" in body
    assert "blocks of 32 tokens" in body
    assert "Trained on `corpus.txt` (30,000 bytes); validation on the last 10% of that text" in body
    assert "Measured on the validation split during training, at step 10." in body
    assert "| output_dir |" not in body and "| path |" not in body  # no paths of the training machine
    resolved = yaml.safe_load((snapshot / "resolved_config.yaml").read_text())
    assert resolved["data"]["block_size"] == 32 and resolved["data"]["train_files"] == ["corpus.txt"]
    assert "cache_dir" not in resolved["data"] and "output_dir" not in resolved["training"]


def test_both_revisions_load_by_repo_id_offline_without_minigpt(published, tmp_path, subprocess_env):
    tokenizer = published["tokenizer"]
    ids = tokenizer(PROMPT, return_tensors="pt").input_ids
    expected = {}
    for tag, seed in (("v1", 0), ("v2", 1), ("main", 1)):
        model = tiny_model(seed=seed)
        expected[tag] = model(ids).logits[0]
    greedy = tiny_model(seed=0).generate(
        ids, max_new_tokens=8, do_sample=False, pad_token_id=1, eos_token_id=None
    )
    expected_text = tokenizer.decode(greedy[0])

    out = tmp_path / "logits.safetensors"
    child = (
        BLOCK_MINIGPT
        + f"""
from safetensors.torch import save_file
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline
repo = {REPO!r}
logits = {{}}
for revision in ("v1", "v2", "main"):
    model = AutoModelForCausalLM.from_pretrained(repo, revision=revision, trust_remote_code=True)
    assert not type(model).__module__.startswith("minigpt"), type(model).__module__
    tokenizer = AutoTokenizer.from_pretrained(repo, revision=revision, trust_remote_code=True)
    ids = tokenizer({PROMPT!r}, return_tensors="pt").input_ids
    logits[revision] = model(ids).logits[0].detach().contiguous()
save_file(logits, {str(out)!r})
generator = pipeline("text-generation", model=repo, revision="v1", trust_remote_code=True)
text = generator({PROMPT!r}, max_new_tokens=8, do_sample=False, pad_token_id=1, eos_token_id=None)
print("GENERATED:" + repr(text[0]["generated_text"]))
from huggingface_hub import snapshot_download
card = open(snapshot_download(repo, local_files_only=True) + "/README.md").read()
exec(card.split("```python")[1].split("```")[0])  # the model card's usage snippet runs as written
print("CARD SNIPPET OK")
"""
    )
    env = dict(subprocess_env, HF_HUB_CACHE=str(published["hub"]), HF_HUB_OFFLINE="1")
    result = subprocess.run(
        [PYTHON, "-c", child],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,  # a prompt for input would read end-of-file, not wait
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Do you wish to run the custom code" not in result.stdout + result.stderr
    assert f"GENERATED:{expected_text!r}" in result.stdout
    assert "CARD SNIPPET OK" in result.stdout  # generate() and the pipeline with the saved defaults
    loaded = load_file(out)
    for revision, logits in expected.items():
        assert torch.equal(loaded[revision], logits), revision
    assert not torch.equal(loaded["v1"], loaded["v2"])


def _without(folder: Path, target: Path, *names: str) -> Path:
    shutil.copytree(folder, target)
    for name in names:
        (target / name).unlink()
    return target


@pytest.mark.parametrize(
    "case",
    [
        "bad-id-dotdot",
        "bad-id-absolute",
        "bad-id-three-parts",
        "bad-id-no-org",
        "bad-id-double-dash",
        "bad-id-space",
        "missing-source",
        "no-weights",
        "pickle-weights-only",
        "no-tokenizer",
        "no-source-files",
        "existing-tag",
        "tag-main",
        "tag-path",
        "empty-folder",
    ],
)
def test_bad_id_or_source_is_one_line_exit_2_and_hub_unchanged(
    case, published, tmp_path, monkeypatch, capsys
):
    final, hub_dir = published["run"] / "final", published["hub"]
    source, repo, extra = str(final), REPO, []
    if case.startswith("bad-id"):
        repo = {
            "bad-id-dotdot": "../evil",
            "bad-id-absolute": "/tmp/evil",
            "bad-id-three-parts": "a/b/c",
            "bad-id-no-org": "tiny",
            "bad-id-double-dash": "org--x/tiny",
            "bad-id-space": "org/ti ny",
        }[case]
    elif case == "missing-source":
        source = str(tmp_path / "nowhere")
    elif case == "no-weights":
        source = str(_without(final, tmp_path / "m", "model.safetensors"))
    elif case == "pickle-weights-only":
        source = str(_without(final, tmp_path / "m", "model.safetensors"))
        torch.save(tiny_model().state_dict(), Path(source) / "pytorch_model.bin")
    elif case == "no-tokenizer":
        source = str(_without(final, tmp_path / "m", "tokenizer.json", "tokenizer_config.json"))
    elif case == "no-source-files":  # MiniGPT's own form needs them (the stock form has none)
        source = str(_without(final, tmp_path / "m", "modeling_minigpt.py"))
        extra = ["--format", "minigpt"]
    elif case == "existing-tag":
        extra = ["--tag", "v1"]
    elif case == "tag-main":
        extra = ["--tag", "main"]
    elif case == "tag-path":
        extra = ["--tag", "../v3"]
    elif case == "empty-folder":
        (tmp_path / "empty").mkdir()
        source = str(tmp_path / "empty")
    before = tree_digest(hub_dir)
    code, out, err = run_script(
        PUSH, [source, "--repo-id", repo, "--hub-dir", str(hub_dir), *extra], monkeypatch, capsys
    )
    assert code == 2
    assert err.startswith("error: ") and err.count("\n") == 1, err
    assert tree_digest(hub_dir) == before


def test_bad_push_into_a_new_hub_folder_creates_nothing(published, tmp_path, monkeypatch, capsys):
    source = _without(published["run"] / "final", tmp_path / "m", "tokenizer.json")
    code, _, err = run_script(
        PUSH, [str(source), "--repo-id", "org/x", "--hub-dir", str(tmp_path / "hub")], monkeypatch, capsys
    )
    assert code == 2 and "tokenizer" in err
    assert not (tmp_path / "hub").exists()


def test_concurrent_pushes_to_one_repo_take_turns(tmp_path):
    hub_dir, workers = tmp_path / "hub", 6
    barrier = threading.Barrier(workers)
    errors: list[BaseException] = []

    def push(i: int) -> None:
        folder = tmp_path / f"src{i}"
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"worker": i}))
        (folder / "model.safetensors").write_bytes(bytes([i]) * 100_000)
        (folder / "shared.txt").write_text("same in every push\n")
        files = {p.name: p for p in folder.iterdir()}
        barrier.wait()
        try:
            hub.push_files(files, "org/busy", hub_dir, f"push {i}")
        except BaseException as err:  # noqa: BLE001  (re-raised below, in the test thread)
            errors.append(err)

    threads = [threading.Thread(target=push, args=(i,)) for i in range(workers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    commits = hub.history(hub_dir, "org/busy")
    assert len(commits) == workers  # one linear chain: no push lost its parent
    assert sorted(c.message for c in commits) == sorted(f"push {i}" for i in range(workers))
    for commit in commits:
        snapshot = commit.snapshot_dir(hub_dir, "org/busy")
        worker = int(commit.message.split()[1])
        assert json.loads((snapshot / "config.json").read_text()) == {"worker": worker}
        assert (snapshot / "model.safetensors").read_bytes() == bytes([worker]) * 100_000
    assert len({c.files["shared.txt"] for c in commits}) == 1
    assert not list((hub_dir / "models--org--busy" / ".staging").iterdir())


def test_a_push_that_dies_before_moving_main_leaves_the_previous_revision(published, tmp_path, monkeypatch):
    hub_dir = tmp_path / "hub"
    first = publish(published["run"], "org/crash", hub_dir)

    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(hub, "_write_ref", crash)
    with pytest.raises(KeyboardInterrupt):
        publish(published["second"], "org/crash", hub_dir, message="interrupted")
    monkeypatch.undo()
    assert hub.resolve_commit(hub_dir, "org/crash") == first.commit_id
    assert [c.commit_id for c in hub.history(hub_dir, "org/crash")] == [first.commit_id]
    again = publish(published["second"], "org/crash", hub_dir, message="retried")
    assert again.parent == first.commit_id


@pytest.mark.parametrize("repo_id", ["org/name", "Org-1/model_2.v3", "a/b", "x" * 40 + "/" + "y" * 96])
def test_valid_repo_ids(repo_id):
    assert hub.validate_model_repo_id(repo_id) == repo_id


@pytest.mark.parametrize(
    "repo_id",
    ["name", "a/b/c", "/abs/x", "../x", "org/..", "org/a..b", "org/a--b", "org/x.git", "org/-x", "ü/x", ""],
)
def test_invalid_repo_ids(repo_id):
    with pytest.raises(hub.HubError):
        hub.validate_model_repo_id(repo_id)


@pytest.mark.parametrize("tag", ["main", "a/b", "..", "v1..2", ".hidden", "x.lock", "a" * 40, "", "sp ace"])
def test_invalid_tags(tag):
    with pytest.raises(hub.HubError):
        hub.validate_tag(tag)


def test_model_argument_resolves_runs_checkpoints_and_repo_ids(published, tmp_path):
    run = published["run"]
    location = resolve_model(run)
    assert location.local_dir == run / "final" and location.run_dir == run
    checkpoint = resolve_model(run / "checkpoint-10")
    assert checkpoint.local_dir == run / "checkpoint-10" and checkpoint.run_dir == (run).resolve()

    unfinished = tmp_path / "unfinished"
    shutil.copytree(run / "checkpoint-10", unfinished / "checkpoint-10")
    with pytest.raises(ModelNotFoundError, match="checkpoint-10"):
        resolve_model(unfinished)

    by_tag = resolve_model(REPO, hub_dir=published["hub"], revision="v1")
    assert by_tag.local_dir.name == published["first"].commit_id
    assert by_tag.from_pretrained_kwargs() == {
        "revision": "v1",
        "cache_dir": str(published["hub"]),
        "local_files_only": True,
    }
    assert resolve_model(REPO, hub_dir=published["hub"]).revision == "main"
    with pytest.raises(hub.HubError, match="no revision 'v9'"):
        resolve_model(REPO, hub_dir=published["hub"], revision="v9")
    with pytest.raises(MiniGPTUserError):
        resolve_model("other/repo", hub_dir=published["hub"])
    with pytest.raises(ModelNotFoundError, match="--revision"):
        resolve_model(run, revision="v1")


def test_file_names_match_what_training_writes():
    from minigpt import run_layout as training
    from minigpt.hub import publishing
    from minigpt.training.checkpoints import RESOLVED_CONFIG_NAME

    assert publishing.RESOLVED_CONFIG_NAME == RESOLVED_CONFIG_NAME
    assert publishing.LOSS_PLOT_FILE == training.LOSS_PLOT_FILE
    assert training.FINAL_DIR == "final"


def test_a_run_with_local_paths_publishes_none_of_them(tmp_path, monkeypatch):
    """A real (tiny) run with absolute and `../` paths: no published file names a local folder."""
    from minigpt.pipeline import run_training
    from minigpt.training.run_config import build_run_config, load_run_config

    text = (REPO_ROOT / "data" / "tinyshakespeare.txt").read_text()
    data_dir, work = tmp_path / "data-q7x", tmp_path / "work-q7x"
    data_dir.mkdir(), work.mkdir()
    (data_dir / "train.txt").write_text(text[:40_000])
    (data_dir / "valid.txt").write_text(text[40_000:44_000])
    monkeypatch.chdir(work)  # the validation file is given relative to it, as ../data-q7x/valid.txt
    run_dir = tmp_path / "run-q7x"
    overrides = [
        f"training.output_dir={run_dir}",
        f"tokenizer.path={tmp_path / 'tok-q7x'}",
        f"data.cache_dir={tmp_path / 'cache-q7x'}",
        f"data.train_files=[{data_dir / 'train.txt'}]",
        "data.validation_files=[../data-q7x/valid.txt]",
        f"hardware.profile={REPO_ROOT / 'configs' / 'hardware' / 'cpu.yaml'}",
        "training.max_steps=4",
        "training.warmup_steps=1",
        "training.eval_steps=4",
        "training.save_steps=4",
        "training.sample_steps=0",
        "tokenizer.show_progress=false",
        "data.show_progress=false",
    ]
    run_training(load_run_config(REPO_ROOT / "configs" / "smoke.yaml", overrides))
    commit = publish(run_dir, "me/portable", tmp_path / "hub")
    snapshot = commit.snapshot_dir(tmp_path / "hub", "me/portable")

    local = [str(tmp_path), "/tmp", "../", "q7x"]  # q7x: every local folder's name, none a file's
    texts = {}
    for path in sorted(snapshot.iterdir()):
        try:
            texts[path.name] = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            assert path.suffix in (".safetensors", ".png"), path.name
    assert {"README.md", "resolved_config.yaml", "config.json", "tokenizer_config.json"} <= texts.keys()
    leaks = {name: [m for m in local if m in text] for name, text in texts.items()}
    assert {name: found for name, found in leaks.items() if found} == {}
    assert "is_local" not in texts["tokenizer_config.json"]  # transformers' loading state

    card = ModelCard.load(snapshot / "README.md")
    assert "datasets" not in card.data.to_dict()
    assert "Trained on `train.txt` (40,000 bytes); validation on `valid.txt` (4,000 bytes)." in card.text
    resolved = yaml.safe_load(texts["resolved_config.yaml"])
    assert resolved["data"]["train_files"] == ["train.txt"]
    assert resolved["data"]["validation_files"] == ["valid.txt"]
    assert "#   train: train.txt (40,000 bytes)" in texts["resolved_config.yaml"]
    rebuilt = build_run_config(resolved)  # still a run config: the dropped folders take their defaults
    assert rebuilt.training.max_steps == 4 and rebuilt.training.output_dir == "runs/minigpt"


def test_a_local_path_left_in_a_published_file_refuses_the_push(tmp_path):
    run = make_run(tmp_path, tokenizer=build_tiny_tokenizer())
    for config_file in (run / "resolved_config.yaml", run / "final" / "resolved_config.yaml"):
        config = yaml.safe_load(config_file.read_text())
        config["training"]["sample_prompts"] = [f"see {run}/notes"]  # no path key, but a path all the same
        config_file.write_text(yaml.safe_dump(config))
    with pytest.raises(
        MiniGPTUserError, match=f"refusing to publish README.md: it names the local path {tmp_path}"
    ):
        publish(run, REPO, tmp_path / "hub")
    assert not (tmp_path / "hub").exists()


def test_an_exported_folder_publishes_with_a_card_that_needs_no_remote_code(tmp_path):
    """One card writer for both folders: the export's card states its check, the published card
    of that folder its stock class, and neither asks for remote code."""
    from minigpt.export.exporting import export_stock_folder

    export_stock_folder(tiny_model(seed=2), build_tiny_tokenizer(), tmp_path / "exported", source_name="tiny")
    exported = ModelCard.load(tmp_path / "exported" / "README.md")
    assert exported.data.tags == ["minigpt", "text-generation", "causal-lm", "gpt2"]
    assert "Exported from the MiniGPT model `tiny` and checked on a batch of tokens" in exported.text
    assert 'from_pretrained("PATH_OR_REPO")' in exported.text and "| hidden_size | `32` |" in exported.text

    commit = publish(tmp_path / "exported", "org/exported", tmp_path / "hub")
    card = ModelCard.load(commit.snapshot_dir(tmp_path / "hub", "org/exported") / "README.md")
    assert "custom_code" not in card.data.tags and "gpt2" in card.data.tags
    assert "trust_remote_code" not in card.text and "`GPT2LMHeadModel`" in card.text
    assert 'AutoModelForCausalLM.from_pretrained("org/exported")' in card.text


def test_loading_a_model_draws_no_progress_bar(published, capfd):
    """Every script loads through load_model: transformers' per-tensor "Loading weights" bar, instant
    for these models, is not drawn (issue #48)."""
    from minigpt.hub.loading import load_model

    capfd.readouterr()
    load_model(resolve_model(published["run"]))
    assert "Loading weights" not in capfd.readouterr().err
