#!/usr/bin/env python3
"""Builds stories_then_mt_bench.jsonl: a prompt stream whose distribution shifts halfway, for
online-adaptation runs (OSD). The 32 SpecBed story prompts (datasets/data/stories, category
"stories") followed by the first turn of the 80 MT-Bench questions (datasets/data/mt_bench,
Apache-2.0, category "mt_bench"), in file order. MT-Bench turns are cut to their first
MAX_CHARS characters (at a word boundary) so that prompt + 128 new tokens fit stories260K's
512-token context with its 512-token vocabulary. Run from the repository root; deterministic."""
import json

MAX_CHARS = 480


def cut(text):
    if len(text) <= MAX_CHARS:
        return text
    head = text[:MAX_CHARS]
    return head[: head.rfind(" ")] if " " in head else head

out = []
with open("datasets/data/stories/prompts.jsonl") as f:
    for line in f:
        q = json.loads(line)
        out.append({"question_id": "stories/" + str(q["question_id"]), "category": "stories",
                    "turns": q["turns"][:1]})
with open("datasets/data/mt_bench/question.jsonl") as f:
    for line in f:
        q = json.loads(line)
        out.append({"question_id": "mt_bench/" + str(q["question_id"]), "category": "mt_bench",
                    "turns": [cut(q["turns"][0])]})
with open("datasets/data/shift/stories_then_mt_bench.jsonl", "w") as f:
    for q in out:
        f.write(json.dumps(q, ensure_ascii=False) + "\n")
