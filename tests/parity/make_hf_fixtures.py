#!/usr/bin/env python3
"""Writes the Hugging Face transformers parity fixtures SpecBed's C++ test checks against.

Run where transformers and PyTorch are installed: the GPU machine's python3 (scripts/gpu_check
runs it; bf16 logits on the GPU) or the project's .venv on any CPU (ctest's
TransformersLive.LogitsAndIds runs it on every CI run through tests/parity/live_parity.sh; bf16
logits on the CPU). A few seconds on a CPU. For each of four tiny random models it writes
OUT/<name>/ with
  config.json, model.safetensors   (save_pretrained, float32)
  expected.json                    transformers' float32 logits of every prompt position, its
                                   bfloat16 last-position logits, and its greedy ids (generate,
                                   do_sample=False) of N_NEW tokens after each prompt
The models cover what SpecBed's loader must get right:
  llama3  LlamaForCausalLM, GQA (8 q heads over 2 KV heads), llama3 rope scaling, untied head
  qwen2   Qwen2ForCausalLM, q/k/v biases, tied head
  qwen3   Qwen3ForCausalLM, q/k RMSNorm, explicit head_dim != hidden / heads, untied head
  mistral MistralForCausalLM, Llama's math with a sliding window (64) wider than every sequence
          here (<= 57 tokens), which SpecBed takes as its context cap; GQA 4 over 1, untied head
Weights are drawn with a fixed seed at a scale (1/sqrt(fan_in), a sharpened head) that makes the
logits far from flat, so greedy ids are not near-ties. Attention is "eager" in float32.
Checked by: tests/models/hf_parity_test.cpp (reads the fixtures; skips while they are absent)
and ctest's TransformersLive.LogitsAndIds (writes them into the build folder, runs it there).
Usage: make_hf_fixtures.py OUT_DIR
"""
import json
import math
import os
import sys

import torch
import transformers
from transformers import (LlamaConfig, LlamaForCausalLM, MistralConfig, MistralForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM, Qwen3Config, Qwen3ForCausalLM)

VOCAB = 256
N_NEW = 16
PROMPTS = [
    [1],
    [1, 17, 200, 33, 5, 98],
    [1] + [(37 * i + 11) % VOCAB for i in range(40)],
]


def configs():
    common = dict(vocab_size=VOCAB, max_position_embeddings=256, rms_norm_eps=1e-5,
                  bos_token_id=1, eos_token_id=2, pad_token_id=0)
    llama3 = LlamaConfig(hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                         num_attention_heads=8, num_key_value_heads=2, tie_word_embeddings=False,
                         rope_theta=500000.0,
                         rope_scaling={"rope_type": "llama3", "factor": 8.0,
                                       "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                       "original_max_position_embeddings": 16},
                         **common)
    qwen2 = Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, tie_word_embeddings=True,
                        rope_theta=10000.0, use_sliding_window=False, **common)
    qwen3 = Qwen3Config(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=24,
                        tie_word_embeddings=False, rope_theta=1000000.0,
                        use_sliding_window=False, **common)
    mistral = MistralConfig(hidden_size=64, intermediate_size=160, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=1,
                            tie_word_embeddings=False, rope_theta=1000000.0, sliding_window=64,
                            **common)
    return [("llama3", LlamaForCausalLM, llama3), ("qwen2", Qwen2ForCausalLM, qwen2),
            ("qwen3", Qwen3ForCausalLM, qwen3), ("mistral", MistralForCausalLM, mistral)]


def sharpen(model, seed):
    """Redraws every weight at a scale where logits are far from flat."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1.0 + 0.2 * torch.randn(p.shape, generator=g))
            elif name.endswith(".bias"):
                p.copy_(0.2 * torch.randn(p.shape, generator=g))
            elif "embed_tokens" in name:
                p.copy_(torch.randn(p.shape, generator=g))
            elif name == "lm_head.weight":
                p.copy_(3.0 / math.sqrt(p.shape[1]) * torch.randn(p.shape, generator=g))
            else:
                p.copy_(1.0 / math.sqrt(p.shape[1]) * torch.randn(p.shape, generator=g))


def expected_for(model, device):
    model = model.to(device).eval()
    out = {"logits": [], "greedy": [], "bf16_last_logits": []}
    with torch.no_grad():
        for prompt in PROMPTS:
            ids = torch.tensor([prompt], device=device)
            logits = model(ids).logits[0].float().cpu()
            out["logits"].append(logits.tolist())
            seq = list(prompt)
            for _ in range(N_NEW):  # greedy by full recompute: no EOS rule, no cache
                step = model(torch.tensor([seq], device=device)).logits[0, -1]
                seq.append(int(step.argmax()))
            out["greedy"].append(seq[len(prompt):])
        bf16 = model.to(torch.bfloat16)
        for prompt in PROMPTS:
            ids = torch.tensor([prompt], device=device)
            out["bf16_last_logits"].append(bf16(ids).logits[0, -1].float().cpu().tolist())
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: make_hf_fixtures.py OUT_DIR")
    root = sys.argv[1]
    torch.manual_seed(0)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for i, (name, cls, config) in enumerate(configs()):
        try:
            config._attn_implementation = "eager"
        except Exception:  # a transformers without the setter keeps its default attention
            pass
        model = cls(config).float()
        sharpen(model, 1000 + i)
        out_dir = os.path.join(root, name)
        os.makedirs(out_dir, exist_ok=True)
        model.save_pretrained(out_dir, safe_serialization=True)
        # Float32 reference on the CPU (no TF32), then the bf16 logits on `device`.
        torch.backends.cuda.matmul.allow_tf32 = False
        expected = expected_for(model, "cpu")
        expected["bf16_last_logits"] = expected_for(model.float(), device)["bf16_last_logits"]
        expected.update({"model": name, "architecture": type(model).__name__,
                         "prompts": PROMPTS, "n_new": N_NEW,
                         "transformers": transformers.__version__, "torch": torch.__version__,
                         "bf16_device": device})
        with open(os.path.join(out_dir, "expected.json"), "w") as f:
            json.dump(expected, f)
        top = torch.tensor(expected["logits"][1][-1]).topk(2).values
        print(f"{name}: wrote {out_dir} (last-position top-2 gap {float(top[0] - top[1]):.3f}, "
              f"greedy {expected['greedy'][1][:8]}...)")


if __name__ == "__main__":
    main()
