#!/usr/bin/env python3
"""Writes the seed corpora of the libFuzzer targets (tests/fuzz/corpus/<target>/) from files in
this repository and small hand-made inputs. Re-run after changing it; the output is committed.
Crash inputs found later are committed next to these seeds as regression inputs (see README).
Checked by: scripts/fuzz (runs every target over these corpora)."""
import json
import os
import shutil
import sqlite3
import struct
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
OUT = os.path.join(ROOT, "tests", "fuzz", "corpus")


def put(target, name, data):
    d = os.path.join(OUT, "fuzz_" + target)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode("utf-8")
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def read(path):
    with open(os.path.join(ROOT, path), "rb") as f:
        return f.read()


def byte_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def small_vocab():
    table = byte_to_unicode()
    vocab = {table[b]: b for b in range(256)}
    extra = ["Ġt", "he", "Ġthe", "ll", "llo", "Ġhello", "12", "123"]
    for i, t in enumerate(extra):
        vocab[t] = 256 + i
    merges = ["Ġ t", "h e", "Ġt he", "l l", "ll o", "1 2", "12 3"]
    return vocab, merges


def tokenizer_json(normalizer=None, split=True):
    vocab, merges = small_vocab()
    pre = [{"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
            "use_regex": not split}]
    if split:
        pre.insert(0, {"type": "Split", "pattern": {"Regex": r"\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+|\s+"},
                       "behavior": "Isolated", "invert": False})
    added = [{"id": 264 + i, "content": c, "special": True}
             for i, c in enumerate(["<|begin_of_text|>", "<|end_of_text|>", "<|eot_id|>"])]
    return json.dumps({
        "version": "1.0", "added_tokens": added, "normalizer": normalizer,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": pre},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<|begin_of_text|>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "special_tokens": {"<|begin_of_text|>": {"id": "<|begin_of_text|>",
                                                                      "ids": [264]}}},
        "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "ignore_merges": False, "vocab": vocab, "merges": merges}})


def safetensors(tensors, metadata=None):
    header = {}
    data = b""
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + len(raw)]}
        data += raw
    if metadata:
        header["__metadata__"] = metadata
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h)) + h + data


def main():
    if os.path.isdir(OUT):
        for t in os.listdir(OUT):
            for f in os.listdir(os.path.join(OUT, t)):
                if f.startswith("seed_"):
                    os.remove(os.path.join(OUT, t, f))
    # JSON reader.
    put("json", "seed_quickstart", read("configs/quickstart.json"))
    put("json", "seed_nested", '{"a": [1, -2.5e3, "x\\u00e9\\ud83d\\ude00", null, true, {"b": {}}]}')
    put("json", "seed_dup", '{"a": 1, "a": 2}')
    put("json", "seed_overflow", '[1e400, -1e999, 18446744073709551616]')
    # Checkpoint headers and configs.
    f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.0)
    put("safetensors", "seed_small", safetensors({"w": ("F32", [2, 2], f32), "b": ("BF16", [2], b"\x80\x3f\x00\x40")},
                                                 {"format": "pt"}))
    put("safetensors", "seed_scalar", safetensors({"s": ("I64", [], struct.pack("<q", 7)), "e": ("F16", [0], b"")}))
    for name in ["models/stories260K/draft/config.json", "models/stories260K/eagle3/config.json",
                 "models/stories260K/dflash/config.json"]:
        put("hf_config", "seed_" + name.split("/")[-2], read(name))
    put("hf_config", "seed_qwen3", json.dumps({
        "architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
        "intermediate_size": 96, "vocab_size": 128, "max_position_embeddings": 256,
        "rope_theta": 1000000.0, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                  "original_max_position_embeddings": 64},
        "eos_token_id": [1, 2], "tie_word_embeddings": True}))
    put("llama2c_header", "seed_stories260K", read("models/stories260K/stories260K.bin")[:28] + b"\0" * 36)
    put("llama2c_header", "seed_negative_vocab", struct.pack("<7i", 64, 172, 5, 8, 4, -512, 512))
    # Tokenizers.
    put("tokenizer_json", "seed_llama3_style", tokenizer_json())
    put("tokenizer_json", "seed_nfc", tokenizer_json({"type": "NFC"}, split=False))
    vocab, merges = small_vocab()
    put("gpt2_vocab", "seed_small", json.dumps(vocab).encode() + b"\0#version: 0.2\n" + "\n".join(merges).encode() + b"\n")
    for i, text in enumerate(["Hello world, it's 2024!\n", "caf\u00e9 cafe\u0301 \u65e5\u672c",
                              "<|endoftext|> tabs\t\tand   spaces", "\xff\xfe raw"]):
        put("bpe_roundtrip", "seed_%d" % i, text.encode("utf-8", "surrogateescape"))
    put("bpe_roundtrip", "seed_bytes", b"\xff\xfe\x00\x80 mixed \xc3\xa9\xe2\x82")
    # Prompt files: first byte picks the format (PromptFileFormats order).
    formats = ["questions_jsonl", "humaneval_jsonl", "gsm8k_jsonl", "math500_jsonl", "ultrachat_json",
               "questions_json"]
    put("prompt_file", "seed_questions_jsonl", b"\x00" + b'{"question_id": 1, "category": "writing", "turns": ["Hi", "More"]}\n{"prompt": "x", "reference": ["a", ""]}\n')
    put("prompt_file", "seed_humaneval", b"\x01" + b'{"task_id": "HumanEval/0", "prompt": "def f():\\n", "canonical_solution": "  pass"}\n')
    put("prompt_file", "seed_gsm8k", b"\x02" + b'{"question": "1+1?", "answer": "#### 2"}\n')
    put("prompt_file", "seed_math500", b"\x03" + b'{"problem": "x", "answer": "1", "subject": "Algebra", "unique_id": "u"}\n')
    put("prompt_file", "seed_ultrachat", b"\x04" + b'[{"class": "Q", "data": ["hi", "there"]}]')
    put("prompt_file", "seed_questions_json", b"\x05" + b'[{"turns": ["a"]},\n {"text": "b", "id": 7}]')
    # Run configs.
    for name in ["configs/quickstart.json", "configs/ci_gate.json", "configs/osd_shift.json",
                 "configs/twin_methods.json"]:
        put("run_config", "seed_" + os.path.basename(name), read(name))
    # Sweep files: the shipped sweeps (paper tables, knob lists and ranges) and small variants.
    for name in ["configs/papers/eagle3.json", "configs/papers/dflash.json", "configs/papers/ltd.json",
                 "configs/papers/specbranch.json", "configs/papers/ddtree.json",
                 "configs/block_drafters_stories.json", "configs/ltd_twin_grid.json",
                 "configs/twin_methods.json"]:
        put("sweep_config", "seed_" + name.replace("configs/", "").replace("/", "_"), read(name))
    put("sweep_config", "seed_ranges", json.dumps({
        "name": "ranges", "temperatures": [0, 1], "seeds": [0, 1],
        "methods": ["ar", {"name": "sps", "knobs": {"gamma": "1-7+2", "drafter": ["stories260K-draft"]}},
                    {"name": "eagle3", "knobs": {"depth": [3, "5-9"], "top_k": "2-8*2",
                                                 "total_tokens": "0.5-1+0.25"}}],
        "repeats": 2, "batch_sizes": [1, 4]}))
    put("sweep_config", "seed_matchers", json.dumps({
        "methods": ["ar", {"name": "sps", "knobs": {"gamma": [2, 4]}}],
        "datasets": ["stories", {"name": "spec_bench", "limit": 2, "categories": ["writing"]}],
        "exclude": [{"method": "sps", "knobs": {"gamma": 4}, "temperature": [0, 1.0]}],
        "only": [{"dataset": ["stories"], "seed": 0, "batch_size": [1], "repeat": 0, "target": "stories260K"}],
        "paper": {"table": "2", "rows": [{"speedup": 2.1}]}, "synthetic_acceptance": [0.5, 0.25],
        "timing": "paired", "stop_strings": ["\n\n"], "max_new_tokens": 64}))
    put("sweep_config", "seed_paths", json.dumps({
        "targets": ["models/stories260K", "stories260K"], "datasets": ["datasets/data/stories/prompts.jsonl"],
        "methods": [{"name": "eagle3", "knobs": {"head": "models/stories260K/eagle3", "drafter": "auto"}}]}))
    put("sweep_config", "seed_overflow", '{"repeats": 2, "top_p": 1e400}')
    put("sweep_config", "seed_dup", '{"methods": [{"name": "sps", "knobs": {"gamma": 3, "gamma": 5}}]}')
    # Results store: a copy of the CI gate's database cut down to a few rows.
    with tempfile.TemporaryDirectory() as tmp:
        db = os.path.join(tmp, "r.db")
        shutil.copy(os.path.join(ROOT, "results/baselines/ci_gate.db"), db)
        con = sqlite3.connect(db)
        con.execute("PRAGMA journal_mode=DELETE")
        # The append-only triggers are lifted while cutting, then restored.
        triggers = con.execute("SELECT name, sql FROM sqlite_schema WHERE type = 'trigger'").fetchall()
        for name, _ in triggers:
            con.execute('DROP TRIGGER "%s"' % name)
        con.execute("DELETE FROM steps WHERE rowid NOT IN (SELECT rowid FROM steps LIMIT 20)")
        con.execute("DELETE FROM samples WHERE rowid NOT IN (SELECT rowid FROM samples LIMIT 6)")
        for _, sql in triggers:
            con.execute(sql)
        con.commit()
        con.execute("VACUUM")
        con.close()
        put("results_store", "seed_ci_gate_cut", open(db, "rb").read())


if __name__ == "__main__":
    main()
