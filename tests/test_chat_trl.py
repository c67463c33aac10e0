"""TRL's `SFTTrainer` fine-tunes a MiniGPT model on conversations with no template work by the user:
the tokenizer's chat template marks the assistant's tokens, and `assistant_only_loss` trains on them."""

from __future__ import annotations

import datasets
import pytest
import torch
import trl
from chat_fixtures import chat_tokenizer, short_conversations
from conftest import tiny_model


# SFTConfig itself still sets transformers' renamed `gradient_checkpointing` (TRL's, not ours).
@pytest.mark.filterwarnings("ignore:`gradient_checkpointing` is deprecated:FutureWarning")
def test_sft_trainer_runs_two_steps_on_a_minigpt_model(tmp_path):
    tokenizer = chat_tokenizer()
    model = tiny_model(vocab_size=len(tokenizer), max_position_embeddings=128).train()
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    train = datasets.Dataset.from_list(short_conversations(8))  # {"messages": [...]} rows, as written
    config = trl.SFTConfig(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=4,
        learning_rate=1e-2,
        assistant_only_loss=True,  # the mask from the template's generation markers
        max_length=128,  # the whole conversation: TRL cuts longer ones at the end
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=True,
        bf16=False,
        dataset_num_proc=None,
    )
    trainer = trl.SFTTrainer(model=model, args=config, train_dataset=train, processing_class=tokenizer)
    # What TRL feeds the model: the assistant's tokens only are labelled.
    row = trainer.train_dataset[0]
    trained = [label for label in row["labels"] if label != -100]
    assert tokenizer.decode(trained) == "Good morrow, 0 times.<|im_end|>"
    assert tokenizer.decode(row["input_ids"]).startswith("<|im_start|>system\nYou are Romeo.<|im_end|>\n")
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(2)])
    labelled = batch["labels"][0][batch["labels"][0] != -100]
    assert tokenizer.decode(labelled) == "Good morrow, 0 times.<|im_end|>"
    result = trainer.train()
    assert result.global_step == 2
    losses = [r["loss"] for r in trainer.state.log_history if "loss" in r]
    assert len(losses) == 2 and all(torch.isfinite(torch.tensor(losses)))
    assert any(not torch.equal(before[n], p) for n, p in model.named_parameters())
