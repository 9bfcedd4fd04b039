#!/usr/bin/env python3
"""Hugging Face transformers as a peer of SpecBed's AR and SpS runs on one target (GPU machine).

Loads TARGET (and DRAFT) with transformers in bfloat16 on CUDA (float32 on the CPU when no GPU is
visible), then for every prompt of PROMPTS (a JSON list of token-id lists, made by
`specbed tokenize --bos --json`) times greedy `generate` twice, as SpecBed times a case:
  ar        model.generate(do_sample=False, max_new_tokens=N)
  assisted  the same with assistant_model=DRAFT (transformers' assisted generation, greedy)
after one untimed warm-up prompt, each prompt timed alone with the GPU synchronized before the
clock is read. Writes OUT_JSON: tokens, seconds, tok/s per mode and the assisted / ar speedup,
and whether the two modes produced identical ids (greedy assisted generation is lossless).
Checked by: scripts/gpu_check (runs it on the GPU machine; skipped where transformers is absent).
Usage: hf_peer.py TARGET_DIR DRAFT_DIR PROMPTS_JSON MAX_NEW_TOKENS OUT_JSON
"""
import json
import sys
import time

import torch
import transformers
from transformers import AutoModelForCausalLM


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def run(model, prompts, n_new, assistant=None):
    out = {"tokens": 0, "seconds": 0.0, "ids": []}
    device = model.device
    warm = torch.tensor([prompts[0]], device=device)
    model.generate(warm, attention_mask=torch.ones_like(warm), do_sample=False,
                   max_new_tokens=8, assistant_model=assistant, pad_token_id=0)
    for p in prompts:
        ids = torch.tensor([p], device=device)
        sync()
        t0 = time.perf_counter()
        gen = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                             max_new_tokens=n_new, assistant_model=assistant, pad_token_id=0)
        sync()
        out["seconds"] += time.perf_counter() - t0
        new = gen[0, len(p):].tolist()
        out["tokens"] += len(new)
        out["ids"].append(new)
    out["tok_per_s"] = out["tokens"] / out["seconds"]
    return out


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    target_dir, draft_dir, prompts_path, n_new, out_path = sys.argv[1:]
    n_new = int(n_new)
    with open(prompts_path) as f:
        prompts = json.load(f)
    cuda = torch.cuda.is_available()
    dtype = torch.bfloat16 if cuda else torch.float32
    device = "cuda" if cuda else "cpu"
    t0 = time.perf_counter()
    target = AutoModelForCausalLM.from_pretrained(target_dir, dtype=dtype).to(device).eval()
    draft = AutoModelForCausalLM.from_pretrained(draft_dir, dtype=dtype).to(device).eval()
    load_s = time.perf_counter() - t0
    with torch.no_grad():
        ar = run(target, prompts, n_new)
        assisted = run(target, prompts, n_new, assistant=draft)
    result = {
        "transformers": transformers.__version__, "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu", "dtype": str(dtype),
        "attn_implementation": getattr(target.config, "_attn_implementation", None),
        "prompts": len(prompts), "max_new_tokens": n_new, "load_seconds": load_s,
        "ar": {k: v for k, v in ar.items() if k != "ids"},
        "assisted": {k: v for k, v in assisted.items() if k != "ids"},
        "assisted_speedup": assisted["tok_per_s"] / ar["tok_per_s"],
        "assisted_ids_equal_ar": assisted["ids"] == ar["ids"],
        "ar_ids": ar["ids"],
    }
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)
    print(f"transformers {transformers.__version__} on {result['device']} ({dtype}): "
          f"AR {ar['tok_per_s']:.1f} tok/s, assisted {assisted['tok_per_s']:.1f} tok/s "
          f"(x{result['assisted_speedup']:.2f}), ids equal: {result['assisted_ids_equal_ar']}")


if __name__ == "__main__":
    main()
