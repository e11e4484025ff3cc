# SPDX-License-Identifier: Apache-2.0
"""Write a tiny Llama GGUF file offline, from mp13's tiny ``llama3`` test model.

The file is laid out as llama.cpp's ``convert_hf_to_gguf.py`` writes a Llama
checkpoint (tensor names, the q/k row permutation, a ``gpt2`` BPE tokenizer,
the chat template), in float32, so transformers reads back exactly the tiny
model's weights: a converted GGUF must answer like the checkpoint it came from.
Also writes files with an architecture transformers cannot read.
"""

from __future__ import annotations

import json
import pathlib

import numpy as np
import torch


def _permute(weights: np.ndarray, n_head: int) -> np.ndarray:
    # llama.cpp interleaves the rotary halves of q and k; transformers undoes this on load.
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


_NAMES = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}


def write_llama_gguf(
    hf_dir: pathlib.Path,
    dest: pathlib.Path,
    *,
    name: str = "mp13 tiny llama",
    end_tokens: dict[str, str] | None = None,
) -> pathlib.Path:
    """Write the tiny Llama (or Mistral) checkpoint in ``hf_dir`` as the GGUF file ``dest``.

    llama.cpp writes Mistral models as the ``llama`` architecture too; transformers
    tells them apart by "mistral" in ``name``. ``end_tokens`` maps ``"eot"`` /
    ``"eom"`` to token texts recorded as end-of-turn / end-of-message tokens.
    """
    import gguf
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(hf_dir, dtype=torch.float32)
    cfg = model.config
    tok = json.loads((hf_dir / "tokenizer.json").read_text(encoding="utf-8"))
    tok_cfg = json.loads((hf_dir / "tokenizer_config.json").read_text(encoding="utf-8"))
    template_file = hf_dir / "chat_template.jinja"
    template = (
        template_file.read_text(encoding="utf-8")
        if template_file.is_file()
        else tok_cfg.get("chat_template")
    )

    dest.parent.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(dest), "llama")
    writer.add_name(name)
    writer.add_context_length(cfg.max_position_embeddings)
    writer.add_embedding_length(cfg.hidden_size)
    writer.add_block_count(cfg.num_hidden_layers)
    writer.add_feed_forward_length(cfg.intermediate_size)
    writer.add_head_count(cfg.num_attention_heads)
    writer.add_head_count_kv(cfg.num_key_value_heads)
    writer.add_rope_freq_base(float(cfg.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(float(cfg.rms_norm_eps))
    writer.add_vocab_size(cfg.vocab_size)
    writer.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)

    vocab = tok["model"]["vocab"]
    added = {a["content"]: a for a in tok.get("added_tokens", [])}
    size = max([*vocab.values(), *(a["id"] for a in added.values())]) + 1
    tokens = [""] * size
    types = [gguf.TokenType.NORMAL] * size
    for text, idx in vocab.items():
        tokens[idx] = text
    for text, info in added.items():
        tokens[info["id"]] = text
        special = info["special"]
        types[info["id"]] = gguf.TokenType.CONTROL if special else gguf.TokenType.USER_DEFINED
    merges = [m if isinstance(m, str) else " ".join(m) for m in tok["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("llama-bpe")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    eos = tokens.index(tok_cfg["eos_token"])
    writer.add_eos_token_id(eos)
    writer.add_pad_token_id(tokens.index(tok_cfg["pad_token"]))
    if tok_cfg.get("bos_token"):
        writer.add_bos_token_id(tokens.index(tok_cfg["bos_token"]))
    writer.add_add_bos_token(False)
    for kind, text in (end_tokens or {}).items():
        getattr(writer, f"add_{kind}_token_id")(tokens.index(text))
    if template:
        writer.add_chat_template(template)

    heads, kv_heads = cfg.num_attention_heads, cfg.num_key_value_heads
    for name, param in model.state_dict().items():
        data = param.detach().numpy().astype(np.float32)
        if name == "model.embed_tokens.weight":
            out = "token_embd.weight"
        elif name == "model.norm.weight":
            out = "output_norm.weight"
        elif name == "lm_head.weight":
            out = "output.weight"
        else:
            _, _, layer, rest = name.split(".", 3)
            module = rest.rsplit(".", 1)[0]
            out = f"blk.{layer}.{_NAMES[module]}.weight"
            if module == "self_attn.q_proj":
                data = _permute(data, heads)
            elif module == "self_attn.k_proj":
                data = _permute(data, kv_heads)
        writer.add_tensor(out, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dest


def write_foreign_gguf(dest: pathlib.Path, arch: str = "mp13-unknown-arch") -> pathlib.Path:
    """A valid GGUF file whose architecture no transformers version reads."""
    import gguf

    writer = gguf.GGUFWriter(str(dest), arch)
    writer.add_name("not a real model")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dest


def with_tensor_type(src: pathlib.Path, dest: pathlib.Path, tensor: str, qtype: object) -> None:
    """Copy GGUF ``src`` to ``dest`` with ``tensor`` stored (as zero blocks) in ``qtype``.

    For quantization types a file may hold but the ``gguf`` package cannot dequantize.
    """
    import gguf

    reader = gguf.GGUFReader(str(src))
    writer = gguf.GGUFWriter(str(dest), "llama")
    for key, field in reader.fields.items():
        if key.startswith("GGUF.") or key == "general.architecture":
            continue  # written by the writer itself
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        writer.add_key_value(key, field.contents(), kind, sub_type=sub)
    for t in reader.tensors:
        shape = list(reversed(t.shape.tolist()))
        if t.name == tensor:
            block, size = gguf.GGML_QUANT_SIZES[qtype]
            raw = np.zeros((shape[0], shape[1] // block * size), dtype=np.uint8)
            writer.add_tensor(t.name, raw, raw_dtype=qtype)
        else:
            writer.add_tensor(t.name, np.array(t.data).reshape(shape))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def write_lora_gguf(dest: pathlib.Path) -> pathlib.Path:
    """A LoRA adapter as llama.cpp's ``convert_lora_to_gguf.py`` writes one: no model shape."""
    import gguf

    writer = gguf.GGUFWriter(str(dest), "llama")
    writer.add_type("adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", 16.0)
    writer.add_tensor("blk.0.attn_q.weight.lora_a", np.zeros((8, 64), dtype=np.float32))
    writer.add_tensor("blk.0.attn_q.weight.lora_b", np.zeros((64, 8), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return dest
