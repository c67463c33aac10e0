"""The README.md of an exported folder: hub metadata, what the model is, how to load it."""

from __future__ import annotations

from huggingface_hub import ModelCard, ModelCardData
from transformers import PretrainedConfig

from .architectures import StockArchitecture


def render_export_card(
    config: PretrainedConfig,
    architecture: StockArchitecture,
    max_logit_difference: float,
    source_name: str | None,
    license: str = "apache-2.0",
) -> str:
    """A model card whose YAML header the hub parses (library, pipeline, tags)."""
    data = ModelCardData(
        library_name="transformers",
        pipeline_tag="text-generation",
        license=license,
        tags=["minigpt", architecture.model_type, "text-generation"],
    )
    class_name = config.architectures[0] if config.architectures else architecture.model_type
    source = f" from the MiniGPT model `{source_name}`" if source_name else " from a MiniGPT model"
    body = f"""
# {source_name or "MiniGPT model"} ({class_name})

Trained with MiniGPT and exported{source} to the stock transformers architecture
`{class_name}`: it loads with plain transformers, no remote code and no `minigpt` package.
The export was checked on a batch of tokens: the logits of this model and of the MiniGPT original
differ by at most {max_logit_difference:.1e} (fp32).

| | |
|---|---|
| architecture | `{class_name}` (`model_type: {architecture.model_type}`) |
| layers x hidden size | {config.num_hidden_layers} x {config.hidden_size} |
| vocabulary | {config.vocab_size} |
| context | {config.max_position_embeddings} tokens |

```python
from transformers import AutoModelForCausalLM, AutoTokenizer

model = AutoModelForCausalLM.from_pretrained("PATH_OR_REPO")
tokenizer = AutoTokenizer.from_pretrained("PATH_OR_REPO")
ids = tokenizer("ROMEO:", return_tensors="pt").input_ids
print(tokenizer.decode(model.generate(ids, max_new_tokens=40, do_sample=True)[0]))
```
"""
    return str(ModelCard(f"---\n{data.to_yaml()}\n---\n{body}"))


__all__ = ["render_export_card"]
