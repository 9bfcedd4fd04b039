#!/usr/bin/env python3
"""Hugging Face transformers as a peer of SpecBed's AR, SpS and ngram runs on one target.

Loads TARGET (and DRAFT) with transformers in bfloat16 on CUDA (float32 on the CPU when no GPU is
visible, or with --cpu), then for every prompt of PROMPTS (a JSON list of token-id lists, made by
`specbed tokenize --bos --json`) times greedy `generate`, as SpecBed times a case:
  ar         model.generate(do_sample=False, max_new_tokens=N)
  assisted   the same with assistant_model=DRAFT: transformers' assisted generation, set to
             SpecBed's `sps` algorithm (GAMMA drafted tokens per step, constant schedule, no
             confidence stop)
  lookup     the same with prompt_lookup_num_tokens=L (max_matching_ngram_size 2): prompt lookup,
             SpecBed's `ngram` (only with --prompt-lookup L)
after one untimed warm-up prompt, each prompt timed alone (the GPU synchronized before the clock is
read). Every mode counts the target's forward passes (its steps). Writes OUT_JSON: tokens,
seconds, tok/s and target forwards per mode, the speedups over ar, whether each mode produced ar's
ids (greedy assisted generation and prompt lookup are lossless), and the ids of every mode.
Importable: scripts/peer_transformers uses load(), configure_assistant() and run() on the CPU.
Checked by: scripts/gpu_check (runs it on the GPU machine; skipped where transformers is absent)
and ctest's TransformersLive.PeerIds (scripts/peer_transformers --check imports it).
Usage: hf_peer.py TARGET_DIR DRAFT_DIR PROMPTS_JSON MAX_NEW_TOKENS OUT_JSON
                  [--gamma 4] [--prompt-lookup L] [--cpu] [--threads T]
"""
import argparse
import json
import time

import torch
import transformers
from transformers import AutoModelForCausalLM


def sync():
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def load(path, dtype, device):
    """A checkpoint in the Hugging Face layout, in eval mode on `device`."""
    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype).to(device).eval()


def configure_assistant(draft, gamma):
    """Assisted generation as SpecBed's sps: gamma drafted tokens every step, always."""
    gc = draft.generation_config
    gc.num_assistant_tokens = gamma
    gc.num_assistant_tokens_schedule = "constant"
    gc.assistant_confidence_threshold = 0.0  # falsy: no early stop of the draft


class ForwardCounter:
    """Counts `model`'s forward calls (one per target step in every generate mode)."""

    def __init__(self, model):
        self.calls = 0
        self.handle = model.register_forward_hook(self._hook)

    def _hook(self, *_):
        self.calls += 1


def run(model, prompts, n_new, assistant=None, prompt_lookup=None, warm=True):
    """Greedy generate on every prompt; tokens, seconds, tok/s, target forwards and the ids."""
    out = {"tokens": 0, "seconds": 0.0, "forwards": 0, "ids": []}
    device = model.device
    extra = {}
    if assistant is not None:
        extra["assistant_model"] = assistant
    if prompt_lookup is not None:
        extra.update(prompt_lookup_num_tokens=prompt_lookup, max_matching_ngram_size=2)

    def generate(ids, n):
        return model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                              max_new_tokens=n, pad_token_id=0, **extra)

    with torch.no_grad():
        if warm:
            generate(torch.tensor([prompts[0]], device=device), 8)
        counter = ForwardCounter(model)
        try:
            for p in prompts:
                ids = torch.tensor([p], device=device)
                sync()
                t0 = time.perf_counter()
                gen = generate(ids, n_new)
                sync()
                out["seconds"] += time.perf_counter() - t0
                new = gen[0, len(p):].tolist()
                out["tokens"] += len(new)
                out["ids"].append(new)
        finally:
            counter.handle.remove()
    out["forwards"] = counter.calls
    out["tok_per_s"] = out["tokens"] / out["seconds"]
    return out


def main():
    ap = argparse.ArgumentParser(usage=__doc__.rsplit("Usage: ", 1)[1])
    ap.add_argument("target_dir")
    ap.add_argument("draft_dir")
    ap.add_argument("prompts_json")
    ap.add_argument("max_new_tokens", type=int)
    ap.add_argument("out_json")
    ap.add_argument("--gamma", type=int, default=4, help="drafted tokens per step (SpecBed sps)")
    ap.add_argument("--prompt-lookup", type=int, default=None,
                    help="also time prompt lookup with this many tokens (SpecBed ngram)")
    ap.add_argument("--cpu", action="store_true", help="float32 on the CPU even with a GPU")
    ap.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    a = ap.parse_args()
    if a.threads:
        torch.set_num_threads(a.threads)
    with open(a.prompts_json) as f:
        prompts = json.load(f)
    cuda = torch.cuda.is_available() and not a.cpu
    dtype = torch.bfloat16 if cuda else torch.float32
    device = "cuda" if cuda else "cpu"
    t0 = time.perf_counter()
    target = load(a.target_dir, dtype, device)
    draft = load(a.draft_dir, dtype, device)
    configure_assistant(draft, a.gamma)
    load_s = time.perf_counter() - t0
    modes = {"ar": run(target, prompts, a.max_new_tokens),
             "assisted": run(target, prompts, a.max_new_tokens, assistant=draft)}
    if a.prompt_lookup:
        modes["lookup"] = run(target, prompts, a.max_new_tokens, prompt_lookup=a.prompt_lookup)
    ar = modes["ar"]
    result = {
        "transformers": transformers.__version__, "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu", "dtype": str(dtype),
        "threads": torch.get_num_threads(),
        "attn_implementation": getattr(target.config, "_attn_implementation", None),
        "prompts": len(prompts), "max_new_tokens": a.max_new_tokens, "gamma": a.gamma,
        "prompt_lookup": a.prompt_lookup, "load_seconds": load_s,
    }
    for name, m in modes.items():
        result[name] = {k: v for k, v in m.items() if k != "ids"}
        if name != "ar":
            result[f"{name}_speedup"] = m["tok_per_s"] / ar["tok_per_s"]
            result[f"{name}_ids_equal_ar"] = m["ids"] == ar["ids"]
        result[f"{name}_ids"] = m["ids"]
    with open(a.out_json, "w") as f:
        json.dump(result, f, indent=1)
    others = ", ".join(f"{n} {modes[n]['tok_per_s']:.1f} tok/s (x{result[n + '_speedup']:.2f}, "
                       f"ids equal: {result[n + '_ids_equal_ar']})" for n in modes if n != "ar")
    print(f"transformers {transformers.__version__} on {result['device']} ({dtype}): "
          f"AR {ar['tok_per_s']:.1f} tok/s, {others}")


if __name__ == "__main__":
    main()
