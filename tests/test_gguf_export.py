"""GGUF export: each MiniGPT option set runs in llama.cpp (xllamacpp, in process) as MiniGPT computes it.

Models are tiny (hidden 32, 2 layers) with random weights scaled so the next-token distributions are
peaked (top log-probabilities around -0.5 to -3, not the flat -5.7 of a fresh init), and the tokenizer is
a byte-level BPE trained on Tiny Shakespeare. llama.cpp runs with an f32 KV cache and flash attention
off (its defaults, an f16 cache and CPU flash attention, round keys, values and queries to f16), one
thread, temperature 0.
"""

from __future__ import annotations

import contextlib
import json
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
import xllamacpp  # a test dependency (setup.cfg's `test` extra): missing, this file fails, it does not skip
from conftest import LLAMA_BLOCK, QWEN3_BLOCK, build_tiny_tokenizer, tiny_model

from minigpt.errors import MiniGPTUserError
from minigpt.export.errors import ExportError
from minigpt.export.gguf_export import gguf_architecture, write_gguf

PROMPT = "First Citizen:\nBefore we proceed"
STEPS = 32  # greedy steps; prompt (25 tokens) + steps stay inside the 64 positions of tiny_model

# (MiniGPT options, the llama.cpp architecture they export to)
CASES = [
    pytest.param(dict(position_embedding_type="learned"), "gpt2", id="learned-gpt2"),
    pytest.param(dict(position_embedding_type="rope"), "starcoder2", id="rope-starcoder2"),
    pytest.param(LLAMA_BLOCK, "llama", id="llama_block-llama"),
    pytest.param(QWEN3_BLOCK, "qwen3", id="qwen3_block-qwen3"),
    # Absent biases (zeros where llama.cpp requires them), an untied head, linear rope scaling.
    pytest.param(
        dict(position_embedding_type="rope", bias=False, tie_word_embeddings=False),
        "starcoder2",
        id="rope_nobias_untied-starcoder2",
    ),
    pytest.param(
        dict(
            LLAMA_BLOCK,
            bias=False,
            tie_word_embeddings=False,
            rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 500.0},
        ),
        "llama",
        id="llama_linear_rope_untied-llama",
    ),
]

# Max |log p(token) difference| over the greedy steps, f32 weights and cache, flash attention off.
# Measured on these models (seed 0): llama 2.6e-6, qwen3 2.3e-6: f32 rounding, the graphs are MiniGPT's.
# gpt2 1.3e-3, starcoder2 9.8e-4: ggml's GELU is read from an f16 table (input and output rounded to 11
# bits, ~5e-4 relative); against MiniGPT with that table emulated (`GGMLGelu`) they fall to 8e-5 and
# 1.7e-4 (a pre-activation that lands the other side of an f16 rounding step moves one table entry), so
# the table is the whole difference. The bounds leave ~4-20x room and stay far below a wrong layout
# (without the llama q/k permutation the first step is already 0.19 off, a zeroed v bias 0.56).
# The closest greedy decision on these paths (top two 3.8e-3 apart, gpt2) is ~3x its measured error.
F32_TOLERANCE = {"gpt2": 5e-3, "starcoder2": 5e-3, "llama": 5e-5, "qwen3": 5e-5}
GGML_GELU_TOLERANCE = 1e-3
# f16 / q8_0 files: ggml's CPU matmul rounds the activations to the weights' kind too (f16, or q8_0 blocks
# of 32 with one scale, 1/254 of the block's max), so every matmul errs by ~5e-4 (f16) or ~1% (q8_0)
# relative. Measured on MiniGPT's greedy path (teacher-forced): f16 2e-3 to 5.2e-3, q8_0 2.9e-2 to 0.13;
# greedy tokens agreed 8/8 for f16, 6-8/8 for q8_0 (the turns where the top two were closer than that).
QUANTIZED_STEPS = 8
QUANTIZED_TOLERANCE = {"f16": 2e-2, "q8_0": 3e-1}


@pytest.fixture(scope="module")
def tokenizer():
    return build_tiny_tokenizer()


def scaled_random_model(seed: int = 0, **options):
    """A tiny MiniGPT whose random weights give peaked distributions: matrices N(0, (1.5 / sqrt(fan_in))^2),
    norm weights 1 + N(0, 0.1^2), biases N(0, 0.1^2), so every tensor (norms and biases included) counts."""
    model = tiny_model(seed=seed, **options)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator)
            if param.ndim > 1:  # (out, in) linear weights, (V, C) / (P, C) embeddings
                param.copy_(noise * 1.5 / param.shape[-1] ** 0.5)
            elif name.endswith("bias"):
                param.copy_(0.1 * noise)
            else:  # LayerNorm / RMSNorm / QK-norm weights
                param.copy_(1.0 + 0.1 * noise)
    return model.eval()


class GGMLGelu(torch.nn.Module):
    """ggml's CPU GELU: the tanh formula on the input rounded to f16, the result rounded to f16
    (a 65536-entry table), 0 below -10 and the identity above 10."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x16 = x.half().float()
        table = 0.5 * x16 * (1.0 + torch.tanh(0.7978845608028654 * x16 * (1.0 + 0.044715 * x16 * x16)))
        return torch.where(x <= -10.0, 0.0, torch.where(x >= 10.0, x, table.half().float()))


def banned_tokens(tokenizer) -> list[int]:
    """Tokens llama.cpp's server could not report a log-probability for: specials (end of text stops the
    run) and byte tokens that are not whole UTF-8 characters (the server holds back an incomplete
    character's text and drops its log-probability). Banned in both runs' greedy choice, never in the
    distributions compared."""
    return [
        index
        for index in range(len(tokenizer))
        if index in tokenizer.all_special_ids or "\ufffd" in tokenizer.decode([index])
    ]


def minigpt_greedy(model, prompt: list[int], steps: int, banned: list[int]) -> tuple[list[int], list[float]]:
    """MiniGPT's greedy tokens (banned ones excluded) and the log-probability of each, unmasked."""
    tokens, logprobs = list(prompt), []
    with torch.no_grad():
        for _ in range(steps):
            logits = model(torch.tensor([tokens])).logits[0, -1]  # (V,)
            logp = torch.log_softmax(logits.double(), dim=-1)
            masked = logp.clone()
            masked[banned] = -torch.inf
            token = int(masked.argmax())
            tokens.append(token)
            logprobs.append(float(logp[token]))
    return tokens[len(prompt) :], logprobs


@contextlib.contextmanager
def llama_server(path: Path) -> Iterator[xllamacpp.Server]:
    """xllamacpp's in-process llama.cpp server on the file: loopback on a free port (0), one slot,
    one compute thread, one HTTP thread, f32 KV cache, no web UI, no prompt cache."""
    params = xllamacpp.CommonParams()
    params.model.path = str(path)
    params.n_ctx = 64
    params.n_parallel = 1
    params.warmup = False
    params.cpuparams.n_threads = 1
    params.cpuparams_batch.n_threads = 1
    params.n_threads_http = 1
    params.hostnames = ["127.0.0.1"]
    params.port = 0
    params.ui = False
    params.endpoint_slots = False
    params.cache_ram_mib = 0
    params.cache_type_k = xllamacpp.ggml_type.GGML_TYPE_F32
    params.cache_type_v = xllamacpp.ggml_type.GGML_TYPE_F32
    # llama.cpp's CPU flash attention (on by default) rounds to f16 inside, f32 cache or not: 9e-3 in
    # log-probabilities here against 3e-6 without it.
    params.flash_attn_type = xllamacpp.llama_flash_attn_type.LLAMA_FLASH_ATTN_TYPE_DISABLED
    server = xllamacpp.Server(params)
    try:
        yield server
    finally:
        del server  # joins llama.cpp's loop thread and closes the socket


def llama_greedy(server, prompt: list[int], steps: int, banned: list[int]) -> tuple[list[int], list[float]]:
    """llama.cpp's greedy tokens and their log-probabilities (softmax of the raw logits: the sampler's
    logit bias bans tokens from the choice, not from the reported distribution)."""
    response = server.handle_completions(
        {
            "prompt": prompt,  # token ids: no tokenization, no BOS added
            "n_predict": steps,
            "temperature": 0,
            "n_probs": 1,
            "logit_bias": [[token, False] for token in banned],  # False: never sampled
        }
    )
    assert "code" not in response, response
    content = response["choices"][0]["logprobs"]["content"]  # one entry per generated token
    return [entry["id"] for entry in content], [entry["logprob"] for entry in content]


def llama_tokenize(server, text: str) -> list[int]:
    """llama.cpp's own tokenization of `text`, from the server's /tokenize route (loopback, no proxy)."""
    request = urllib.request.Request(
        server.listening_address.rstrip("/") + "/tokenize",
        data=json.dumps({"content": text, "add_special": False}).encode(),
        headers={"Content-Type": "application/json"},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(request, timeout=30) as reply:
        return json.loads(reply.read())["tokens"]


@pytest.mark.parametrize("options, arch", CASES)
def test_llama_cpp_runs_the_gguf_as_minigpt(tmp_path, tokenizer, options, arch):
    model = scaled_random_model(**options)
    path = tmp_path / "model.gguf"
    assert write_gguf(model, tokenizer, path) == arch
    prompt = tokenizer(PROMPT)["input_ids"]
    banned = banned_tokens(tokenizer)
    expected_tokens, expected_logprobs = minigpt_greedy(model, prompt, STEPS, banned)
    # Not flat: the greedy token is well above uniform (log 1/300 = -5.7), so a wrong layout would show.
    assert max(expected_logprobs) > -3.0
    with llama_server(path) as server:
        tokens, logprobs = llama_greedy(server, prompt, STEPS, banned)
    assert tokens == expected_tokens
    diff = np.abs(np.array(logprobs) - np.array(expected_logprobs)).max()
    assert diff < F32_TOLERANCE[arch], f"max |log p difference| {diff:.2e}"
    if arch in ("gpt2", "starcoder2"):  # the difference is ggml's f16 GELU table, nothing else
        for block in model.transformer.h:
            block.mlp.act = GGMLGelu()
        emulated_tokens, emulated_logprobs = minigpt_greedy(model, prompt, STEPS, banned)
        assert emulated_tokens == tokens
        diff = np.abs(np.array(logprobs) - np.array(emulated_logprobs)).max()
        assert diff < GGML_GELU_TOLERANCE, f"max |log p difference| {diff:.2e} with ggml's GELU table"


def test_llama_cpp_tokenizes_as_the_hf_tokenizer(tmp_path, tokenizer):
    model = scaled_random_model()
    path = tmp_path / "model.gguf"
    write_gguf(model, tokenizer, path)
    texts = [
        (Path(__file__).resolve().parents[1] / "data" / "tinyshakespeare.txt").read_text()[30_000:32_000],
        "  leading spaces, trailing   \n\n\ttabs 1234567 3.14 it's we'll I'M\r\n",
        "héllo wörld — naïve café, 日本語, emoji 😀🎭, ∑x² ≠ 0",
    ]
    with llama_server(path) as server:
        for text in texts:
            assert llama_tokenize(server, text) == tokenizer(text)["input_ids"], text[:40]


@pytest.mark.parametrize("dtype", ["f16", "q8_0"])
@pytest.mark.parametrize("options, arch", CASES[:4])
def test_f16_and_q8_0_files_run_within_their_rounding(tmp_path, tokenizer, options, arch, dtype):
    model = scaled_random_model(**options)
    path = tmp_path / f"model-{dtype}.gguf"
    write_gguf(model, tokenizer, path, dtype=dtype)
    # Matrices are stored in `dtype` (every row here is a whole number of 32-value blocks), vectors f32.
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(path).tensors}
    wanted = gguf.GGMLQuantizationType.F16 if dtype == "f16" else gguf.GGMLQuantizationType.Q8_0
    assert types["blk.0.ffn_down.weight"] == wanted
    assert types["blk.0.attn_norm.weight"] == gguf.GGMLQuantizationType.F32
    prompt = tokenizer(PROMPT)["input_ids"]
    banned = banned_tokens(tokenizer)
    expected_tokens, expected_logprobs = minigpt_greedy(model, prompt, QUANTIZED_STEPS, banned)
    margins = minigpt_margins(model, prompt, expected_tokens, banned)
    with llama_server(path) as server:
        steps = llama_teacher_forced(server, prompt, expected_tokens, banned)
    tolerance = QUANTIZED_TOLERANCE[dtype]
    diffs = [
        abs(logprobs[token] - expected)
        for (_, logprobs), token, expected in zip(steps, expected_tokens, expected_logprobs, strict=True)
    ]
    assert max(diffs) < tolerance, f"max |log p difference| {max(diffs):.2e}"
    # The same greedy token wherever MiniGPT's choice is not within the rounding (its lead over the
    # runner-up exceeds twice the tolerance): a rounding error cannot turn those, a wrong tensor would.
    for (greedy, _), token, margin in zip(steps, expected_tokens, margins, strict=True):
        if margin > 2 * tolerance:
            assert greedy == token


def minigpt_margins(model, prompt: list[int], continuation: list[int], banned: list[int]) -> list[float]:
    """At each step, how far MiniGPT's greedy token leads the runner-up in log-probability."""
    with torch.no_grad():
        logits = model(torch.tensor([prompt + continuation])).logits[0, len(prompt) - 1 : -1]  # (steps, V)
        logp = torch.log_softmax(logits.double(), dim=-1)
        logp[:, banned] = -torch.inf
        top2 = logp.topk(2, dim=-1).values  # (steps, 2)
    return (top2[:, 0] - top2[:, 1]).tolist()


def llama_teacher_forced(
    server, prompt: list[int], continuation: list[int], banned: list[int]
) -> list[tuple[int, dict[int, float]]]:
    """For each prefix prompt + continuation[:i]: llama.cpp's greedy next token and its top-10
    log-probabilities {token: log p}, so a quantized file is compared on MiniGPT's path even where
    its own greedy choice would turn."""
    steps = []
    for i in range(len(continuation)):
        response = server.handle_completions(
            {
                "prompt": prompt + continuation[:i],
                "n_predict": 1,
                "temperature": 0,
                "n_probs": 10,
                "logit_bias": [[token, False] for token in banned],
            }
        )
        assert "code" not in response, response
        entry = response["choices"][0]["logprobs"]["content"][0]
        steps.append((entry["id"], {top["id"]: top["logprob"] for top in entry["top_logprobs"]}))
    return steps


def read_fields(path: Path) -> dict:
    reader = gguf.GGUFReader(path)
    return {name: field.contents() for name, field in reader.fields.items()}, {t.name for t in reader.tensors}


def test_metadata_tokenizer_and_tied_head(tmp_path, tokenizer):
    path = tmp_path / "model.gguf"
    write_gguf(scaled_random_model(**LLAMA_BLOCK), tokenizer, path)
    fields, tensors = read_fields(path)
    assert fields["general.architecture"] == "llama"
    assert fields["tokenizer.ggml.model"] == "gpt2"
    assert fields["tokenizer.ggml.pre"] == "gpt-2"
    tokens, types = fields["tokenizer.ggml.tokens"], fields["tokenizer.ggml.token_type"]
    assert len(tokens) == 300  # the model's vocab_size; rows past the tokenizer are UNUSED padding
    for special in ("<|endoftext|>", "<|pad|>"):
        assert types[tokens.index(special)] == gguf.TokenType.CONTROL
    assert fields["tokenizer.ggml.eos_token_id"] == tokenizer.eos_token_id
    assert fields["tokenizer.ggml.padding_token_id"] == tokenizer.pad_token_id
    assert fields["tokenizer.ggml.add_bos_token"] is False
    assert fields["llama.context_length"] == 64
    assert fields["llama.rope.freq_base"] == 10000.0
    assert fields["llama.attention.layer_norm_rms_epsilon"] == pytest.approx(1e-5)
    assert "output.weight" not in tensors  # tied: llama.cpp reuses token_embd
    untied = tmp_path / "untied.gguf"
    write_gguf(scaled_random_model(**LLAMA_BLOCK, tie_word_embeddings=False), tokenizer, untied)
    assert "output.weight" in read_fields(untied)[1]


CONVERSATION = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Who art thou?"}]
CHAT_STEPS = 12  # reply tokens at most; the 43-token prompt and the reply fit the 64 positions


def end_of_turn_bias(model, prompt: list[int], banned: list[int], end_of_turn: int) -> tuple[float, int]:
    """A logit bias for `end_of_turn` that makes it the greedy choice at one step k >= 4 of the reply
    and at none before (a random model never ends a turn by itself): halfway between its gap to the
    leader at k and the smallest gap before k. Returns (bias, k)."""
    tokens, gaps = list(prompt), []
    with torch.no_grad():
        for _ in range(CHAT_STEPS - 1):
            logits = model(torch.tensor([tokens])).logits[0, -1].double()  # (V,)
            logits[banned] = -torch.inf
            gaps.append(float(logits.max() - logits[end_of_turn]))
            tokens.append(int(logits.argmax()))
    k = min(range(4, len(gaps)), key=lambda i: gaps[i] - min(gaps[:i]))
    assert gaps[k] < min(gaps[:k]) - 0.1, gaps  # room for rounding either side of the bias
    return (gaps[k] + min(gaps[:k])) / 2, k


def test_llama_cpp_chat_completion_gives_transformers_greedy_reply(tmp_path):
    """The GGUF of a chat model carries ChatML's template (without generation markers) and
    <|im_end|> as its end-of-turn token: llama.cpp's chat completion formats the conversation as
    transformers does and answers with the same greedy tokens, stopping at <|im_end|>."""
    from minigpt.data.chat_template import IM_END, template_without_generation_markers
    from minigpt.data.settings import TokenizerSettings
    from minigpt.data.tokenizer import train_tokenizer

    settings = TokenizerSettings(vocab_size=300, show_progress=False)  # <|im_start|> 2, <|im_end|> 3
    texts = (Path(__file__).resolve().parents[1] / "data" / "tinyshakespeare.txt").read_text()[:20_000]
    chat_tokenizer = train_tokenizer(texts.split("\n\n"), settings)
    model = scaled_random_model(**QWEN3_BLOCK)
    path = tmp_path / "chat.gguf"
    write_gguf(model, chat_tokenizer, path)
    fields, _ = read_fields(path)
    assert fields["tokenizer.chat_template"] == template_without_generation_markers()
    assert fields["tokenizer.ggml.eot_token_id"] == 3 and fields["tokenizer.ggml.eos_token_id"] == 0

    end_of_turn = chat_tokenizer.convert_tokens_to_ids(IM_END)
    prompt = chat_tokenizer.apply_chat_template(CONVERSATION, add_generation_prompt=True, return_dict=True)
    prompt = prompt["input_ids"]
    banned = [t for t in banned_tokens(chat_tokenizer) if t != end_of_turn]
    bias, k = end_of_turn_bias(model, prompt, banned, end_of_turn)
    expected = model.generate(
        torch.tensor([prompt]),
        max_new_tokens=CHAT_STEPS,
        do_sample=False,
        eos_token_id=[0, end_of_turn],
        bad_words_ids=[[t] for t in banned],
        sequence_bias={(end_of_turn,): bias},
    )[0, len(prompt) :].tolist()
    assert len(expected) == k + 1 and expected[-1] == end_of_turn  # the reply, then <|im_end|>

    with llama_server(path) as server:
        response = server.handle_chat_completions(
            {
                "messages": CONVERSATION,  # llama.cpp applies the GGUF's template
                "max_tokens": CHAT_STEPS,
                "temperature": 0,
                "logprobs": True,
                "logit_bias": [[t, False] for t in banned] + [[end_of_turn, bias]],
            }
        )
    assert "code" not in response, response
    choice = response["choices"][0]
    assert response["usage"]["prompt_tokens"] == len(prompt)  # the same conversation text
    assert [entry["id"] for entry in choice["logprobs"]["content"]] == expected  # <|im_end|> included
    assert choice["finish_reason"] == "stop"  # at <|im_end|>, not the length limit
    assert choice["message"]["content"] == chat_tokenizer.decode(expected, skip_special_tokens=True)


@pytest.mark.parametrize(
    "options, option",
    [
        (dict(norm_type="rmsnorm"), "norm_type='rmsnorm'"),
        (dict(mlp_type="gated"), "mlp_type='gated'"),
        (dict(qk_norm=True), "qk_norm=True"),
        (dict(hidden_act="gelu"), "hidden_act='gelu'"),  # erf GELU: llama.cpp's is the tanh one
        (dict(position_embedding_type="rope", hidden_act="relu"), "hidden_act='relu'"),
        (dict(position_embedding_type="rope", mlp_type="gated", hidden_act="gelu"), "mlp_type='gated'"),
        (dict(position_embedding_type="rope", qk_norm=True), "qk_norm=True"),
        (dict(position_embedding_type="rope", norm_type="rmsnorm"), "mlp_type='standard'"),
        (dict(LLAMA_BLOCK, hidden_act="gelu"), "hidden_act='gelu'"),  # GeGLU
        (dict(QWEN3_BLOCK, bias=True), "bias=True"),
        (
            dict(LLAMA_BLOCK, rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4}),
            "rope_parameters['rope_type']='dynamic'",
        ),
        (
            dict(LLAMA_BLOCK, rope_parameters={"rope_type": "yarn", "factor": 2.0, "rope_theta": 1e4}),
            "rope_parameters['rope_type']='yarn'",
        ),
    ],
)
def test_options_llama_cpp_cannot_express_are_refused_in_one_line(tmp_path, tokenizer, options, option):
    model = tiny_model(**options)
    with pytest.raises(ExportError) as refusal:
        gguf_architecture(model.config)
    message = str(refusal.value)
    assert isinstance(refusal.value, MiniGPTUserError)
    assert message.startswith(option) and "\n" not in message
    with pytest.raises(ExportError, match=message.split(":")[0].replace("[", r"\[").replace("]", r"\]")):
        write_gguf(model, tokenizer, tmp_path / "refused.gguf")
    assert list(tmp_path.iterdir()) == []  # nothing written, not even a temporary file


def test_bad_dtype_and_tokenizer_are_refused(tmp_path, tokenizer):
    model = tiny_model()
    with pytest.raises(ExportError, match="^dtype='q4_0'"):
        write_gguf(model, tokenizer, tmp_path / "model.gguf", dtype="q4_0")
    from tokenizers import pre_tokenizers

    prefixed = build_tiny_tokenizer()
    prefixed.backend_tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True)
    with pytest.raises(ExportError, match="^tokenizer.pre_tokenizer"):
        write_gguf(model, prefixed, tmp_path / "model.gguf")
    assert list(tmp_path.iterdir()) == []


def test_q8_0_keeps_rows_that_fill_no_whole_block_in_f16(tmp_path, tokenizer):
    path = tmp_path / "model.gguf"
    write_gguf(tiny_model(hidden_size=48, intermediate_size=64), tokenizer, path, dtype="q8_0")
    types = {t.name: t.tensor_type for t in gguf.GGUFReader(path).tensors}
    assert types["blk.0.attn_qkv.weight"] == gguf.GGMLQuantizationType.F16  # rows of 48 values
    assert types["blk.0.ffn_down.weight"] == gguf.GGMLQuantizationType.Q8_0  # rows of 64 values
    assert types["position_embd.weight"] == gguf.GGMLQuantizationType.F32


def test_a_tokenizer_larger_than_the_model_or_another_model_is_refused(tmp_path, tokenizer):
    with pytest.raises(ExportError, match="^vocab_size=256: the tokenizer has 300 tokens"):
        write_gguf(tiny_model(vocab_size=256), tokenizer, tmp_path / "model.gguf")
    from transformers import GPT2Config, GPT2LMHeadModel

    stock = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=1, n_head=2, vocab_size=300))
    with pytest.raises(ExportError, match="^model='GPT2LMHeadModel'"):
        write_gguf(stock, tokenizer, tmp_path / "model.gguf")
    assert list(tmp_path.iterdir()) == []


def test_a_failed_write_leaves_the_previous_file_and_no_temporary(tmp_path, tokenizer, monkeypatch):
    path = tmp_path / "model.gguf"
    path.write_bytes(b"previous")

    def crash(self, *args, **kwargs):
        raise KeyboardInterrupt  # as a Ctrl-C half-way through the tensors

    monkeypatch.setattr(gguf.GGUFWriter, "write_tensors_to_file", crash)
    with pytest.raises(KeyboardInterrupt):
        write_gguf(tiny_model(), tokenizer, path)
    assert path.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["model.gguf"]
