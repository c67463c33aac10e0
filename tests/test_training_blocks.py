"""Training reads packed blocks zero-copy; with data.shift_blocks each epoch from its own offset, resuming exactly."""

from __future__ import annotations

import datasets
import numpy as np
import pytest
import torch
from conftest import REPO_ROOT, small_run, write_small_corpus
from safetensors.torch import load_file
from transformers import TrainerCallback, TrainerState

from minigpt.data import run_data
from minigpt.data.corpus import block_features
from minigpt.data.run_data import TrainingBlocks, epoch_offset
from minigpt.pipeline import run_training
from minigpt.training.callbacks import EpochCallback
from minigpt.training.interrupt import StopController

BLOCK = 8


def packed(stream: np.ndarray, chunks: int) -> datasets.Dataset:
    """`stream` cut into blocks of BLOCK, as packing writes them, held in `chunks` Arrow chunks."""
    rows = stream[: len(stream) // BLOCK * BLOCK].reshape(-1, BLOCK)
    parts = [
        datasets.Dataset.from_dict({"input_ids": part.tolist(), "labels": part.tolist()}, features=block_features(BLOCK))
        for part in np.array_split(rows, chunks)
    ]
    return datasets.concatenate_datasets(parts)


@pytest.mark.parametrize("chunks", [1, 3])
def test_each_epoch_reads_the_stream_from_its_offset(chunks):
    stream = np.arange(1000, 1000 + 10 * BLOCK + 5)  # 10 whole blocks; 5 tokens left over
    blocks = packed(stream, chunks)
    assert len(blocks.data.column("input_ids").chunks) == chunks
    unshifted = TrainingBlocks(blocks, seed=7, shift=False)
    unshifted.start_epoch(3)
    assert len(unshifted) == 10 and unshifted.offset == 0
    assert [unshifted[i]["input_ids"].tolist() for i in range(10)] == blocks["input_ids"]
    shifted = TrainingBlocks(blocks, seed=7, shift=True)
    assert len(shifted) == 9  # the last block has no successor to borrow from, in every epoch
    for index in range(len(shifted)):  # epoch 0: the packed blocks themselves
        assert shifted[index]["input_ids"].tolist() == blocks[index]["input_ids"]
    offsets = set()
    for epoch in range(1, 8):
        shifted.start_epoch(epoch)
        offset = epoch_offset(7, epoch, BLOCK)
        assert shifted.offset == offset and 0 <= offset < BLOCK
        offsets.add(offset)
        for index in range(len(shifted)):
            item = shifted[index]
            start = index * BLOCK + offset
            assert item["input_ids"].dtype == torch.int64
            assert item["input_ids"].tolist() == stream[start : start + BLOCK].tolist()
            assert torch.equal(item["labels"], item["input_ids"])
    assert len(offsets) > 2  # epochs do move
    with pytest.raises(IndexError):
        shifted[len(shifted)]


def test_offsets_depend_on_seed_and_epoch_only():
    assert epoch_offset(3, 0, 128) == 0
    assert [epoch_offset(3, e, 128) for e in range(1, 20)] == [epoch_offset(3, e, 128) for e in range(1, 20)]
    assert [epoch_offset(3, e, 128) for e in range(1, 20)] != [epoch_offset(4, e, 128) for e in range(1, 20)]


class RecordOffsets(TrainerCallback):
    """The training dataset's offset at each epoch's start, and a stop request at `stop_at`."""

    def __init__(self, stop: StopController | None = None, stop_at: int | None = None) -> None:
        self.offsets: dict[int, int] = {}
        self.stop, self.stop_at = stop, stop_at

    def on_epoch_begin(self, args, state, control, train_dataloader=None, **kwargs) -> None:
        dataset = train_dataloader.dataset
        self.offsets[dataset.epoch] = dataset.offset

    def on_step_end(self, args, state, control, **kwargs) -> None:
        if self.stop is not None and state.global_step == self.stop_at:
            self.stop.request_stop()


def test_a_stopped_and_resumed_run_reads_the_same_windows_and_ends_bit_identical(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)
    corpus = write_small_corpus(tmp_path)
    recorded = RecordOffsets()
    run_training(small_run(tmp_path / "reference", corpus), callbacks=[recorded])
    seed = small_run(tmp_path / "reference", corpus).training.seed
    assert len(recorded.offsets) >= 3, recorded.offsets
    assert recorded.offsets == {e: epoch_offset(seed, e, 16) for e in recorded.offsets}
    assert any(recorded.offsets.values())

    stop = StopController()
    stopped = run_training(
        small_run(tmp_path / "resumed", corpus), callbacks=[RecordOffsets(stop, stop_at=12)], stop_controller=stop
    )
    assert stopped.stopped
    resumed_offsets = RecordOffsets()
    run_training(small_run(tmp_path / "resumed", corpus), callbacks=[resumed_offsets], resume=True)
    resumed_epoch = min(resumed_offsets.offsets)
    assert resumed_epoch > 0 and resumed_offsets.offsets[resumed_epoch] == recorded.offsets[resumed_epoch]

    final = load_file(tmp_path / "resumed" / "final" / "model.safetensors")
    expected = load_file(tmp_path / "reference" / "final" / "model.safetensors")
    for name in expected:
        assert torch.equal(final[name], expected[name]), f"{name} differs after stop and resume"


def test_without_the_setting_training_reads_the_packed_blocks(tmp_path, monkeypatch):
    """Unshifted, the zero-copy reader gives Trainer the batches `datasets` would: the same model,
    bit for bit. The shifted run reuses the same cached blocks (shift_blocks is not in the key)."""
    monkeypatch.chdir(REPO_ROOT)
    corpus = write_small_corpus(tmp_path)
    unshifted = ("data.shift_blocks=false", "training.max_steps=6")
    run_training(small_run(tmp_path / "zero-copy", corpus, *unshifted))
    class ThroughDatasets:  # Trainer reads the Arrow rows through datasets itself
        def __new__(cls, blocks, seed, shift):
            return blocks

    with monkeypatch.context() as patched:
        patched.setattr(run_data, "TrainingBlocks", ThroughDatasets)
        run_training(small_run(tmp_path / "datasets", corpus, *unshifted))
    zero_copy = load_file(tmp_path / "zero-copy" / "final" / "model.safetensors")
    through_datasets = load_file(tmp_path / "datasets" / "final" / "model.safetensors")
    for name in through_datasets:
        assert torch.equal(zero_copy[name], through_datasets[name]), f"{name} differs"

    run_training(small_run(tmp_path / "shifted", corpus, "training.max_steps=6"))
    assert len(list((tmp_path / "cache" / "blocks").iterdir())) == 1


@pytest.mark.parametrize(("trainer_epoch", "epoch"), [(0.0, 0), (1.0, 1), (2.75, 2), (5.0, 5), (3 + 0.999999, 3)])
def test_the_callback_takes_the_epoch_from_the_trainer_state(trainer_epoch, epoch):
    """At an epoch's start state.epoch is that epoch; on resume it is the epochs trained plus a fraction."""
    stream = np.arange(10 * BLOCK)
    dataset = TrainingBlocks(packed(stream, 1), seed=5, shift=True)
    EpochCallback(dataset.start_epoch).on_epoch_begin(None, TrainerState(epoch=trainer_epoch), None)
    assert dataset.epoch == epoch and dataset.offset == epoch_offset(5, epoch, BLOCK)
