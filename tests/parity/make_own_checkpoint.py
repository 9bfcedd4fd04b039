"""Tiny stand-ins for "your own checkpoint on a GPU" (README.md): a Hugging Face Llama target and
a published-layout EAGLE-3 head for it, as a user downloads them.

  make_own_checkpoint.py OUT GPT2_TOKENIZER_DIR

writes
  OUT/target/  config.json + model.safetensors (transformers save_pretrained, bfloat16, 4 layers,
               width 64, GPT-2 vocabulary) + the GPT-2 tokenizer files (vocab.json, merges.txt);
  OUT/head/    config.json in the published EAGLE-3 layout (LlamaForCausalLMEagle3, one decoder
               layer, draft_vocab_size 2048 with d2t / t2d, eagle_config's aux layer ids) and a
               pickled pytorch_model.bin (bfloat16), as yuhuili/EAGLE3-LLaMA3.1-Instruct-8B ships,
               for the README's conversion recipe to turn into model.safetensors.
Weights are random (seeded): the files exercise the loaders and the path a user takes, not
acceptance. Run by scripts/own_checkpoint with the project's .venv.
Checked by: ctest TreeCheck.OwnCheckpointFromReadme (scripts/own_checkpoint).
"""

import json
import os
import shutil
import sys

import torch
import transformers

VOCAB = 50257  # GPT-2's
EOS = 50256
HIDDEN, FFN, HEADS, KV_HEADS, LAYERS = 64, 128, 4, 2, 4
DRAFT_VOCAB = 2048
AUX_LAYERS = [1, 2, 3]


def write_target(out, tokenizer_dir):
    torch.manual_seed(0)
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN,
        num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, num_hidden_layers=LAYERS,
        max_position_embeddings=4096, rms_norm_eps=1e-5, bos_token_id=EOS, eos_token_id=EOS,
        tie_word_embeddings=False)
    model = transformers.LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    for name in ("vocab.json", "merges.txt"):
        shutil.copy(os.path.join(tokenizer_dir, name), out)


def head_tensors():
    g = torch.Generator().manual_seed(1)
    q_dim, kv_dim = HIDDEN, HIDDEN // HEADS * KV_HEADS

    def rand(*shape):
        return (torch.randn(*shape, generator=g) * 0.05).to(torch.bfloat16)

    ones = lambda n: torch.ones(n, dtype=torch.bfloat16)
    layer = "midlayer."
    t2d = torch.zeros(VOCAB, dtype=torch.bool)
    t2d[:DRAFT_VOCAB] = True
    return {
        "fc.weight": rand(HIDDEN, 3 * HIDDEN),
        layer + "hidden_norm.weight": ones(HIDDEN),
        layer + "input_layernorm.weight": ones(HIDDEN),
        layer + "self_attn.q_proj.weight": rand(q_dim, 2 * HIDDEN),
        layer + "self_attn.k_proj.weight": rand(kv_dim, 2 * HIDDEN),
        layer + "self_attn.v_proj.weight": rand(kv_dim, 2 * HIDDEN),
        layer + "self_attn.o_proj.weight": rand(HIDDEN, q_dim),
        layer + "post_attention_layernorm.weight": ones(HIDDEN),
        layer + "mlp.gate_proj.weight": rand(FFN, HIDDEN),
        layer + "mlp.up_proj.weight": rand(FFN, HIDDEN),
        layer + "mlp.down_proj.weight": rand(HIDDEN, FFN),
        "norm.weight": ones(HIDDEN),
        "lm_head.weight": rand(DRAFT_VOCAB, HIDDEN),
        "d2t": torch.zeros(DRAFT_VOCAB, dtype=torch.int64),  # draft id i -> target id i + d2t[i]
        "t2d": t2d,
    }


def write_head(out):
    os.makedirs(out, exist_ok=True)
    config = {
        "architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama",
        "hidden_size": HIDDEN, "intermediate_size": FFN, "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS, "num_hidden_layers": 1, "vocab_size": VOCAB,
        "draft_vocab_size": DRAFT_VOCAB, "max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "hidden_act": "silu", "bos_token_id": EOS, "eos_token_id": EOS,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16",
        "eagle_config": {"eagle_aux_hidden_state_layer_ids": AUX_LAYERS,
                         "use_aux_hidden_state": True},
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    torch.save(head_tensors(), os.path.join(out, "pytorch_model.bin"))


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: make_own_checkpoint.py OUT GPT2_TOKENIZER_DIR")
    out, tokenizer_dir = sys.argv[1], sys.argv[2]
    write_target(os.path.join(out, "target"), tokenizer_dir)
    write_head(os.path.join(out, "head"))
    print(f"make_own_checkpoint: target and head written under {out}")


if __name__ == "__main__":
    main()
