// The results database's DDL: schema version 1 as it was first written, and the migration of
// each later version (hand-written up to kFirstGeneratedVersion - 1, then generated from the field
// tables of record_schema.h). A new file runs version 1 and every migration, so new and migrated
// files have the same columns. Migrations only add tables, columns, indexes or replace views:
// stored results are never rewritten.
// Checked by: tests/results/store_test.cpp (MigratesSchemaV1ToV2: a frozen v1 file migrated equals
// a new one), tests/results/record_schema_test.cpp (every version laid out, read back, migrated).
#include "results/schema_sql.h"

#include "results/record_schema.h"
#include "results/store.h"

namespace specbed {
namespace {

// Schema version 1. Keep every column documented in results/README.md (a test checks it).
// REAL columns are nullable only so that NaN (which SQLite stores as NULL) round-trips.
constexpr const char* kSchemaV1Ddl = R"sql(
CREATE TABLE meta (
  key   TEXT PRIMARY KEY NOT NULL,
  value TEXT NOT NULL
) STRICT;

CREATE TABLE runs (
  run_id                INTEGER PRIMARY KEY,
  started_at            TEXT NOT NULL,
  specbed_version       TEXT NOT NULL,
  git_commit            TEXT NOT NULL,
  build_flags           TEXT NOT NULL,
  host                  TEXT NOT NULL,
  cpu                   TEXT NOT NULL,
  gpu                   TEXT NOT NULL,
  library_versions_json TEXT NOT NULL,
  config_json           TEXT NOT NULL,
  repro_command         TEXT NOT NULL
) STRICT;

CREATE TABLE cases (
  case_id           INTEGER PRIMARY KEY,
  run_id            INTEGER NOT NULL REFERENCES runs(run_id),
  case_key          TEXT NOT NULL,
  target            TEXT NOT NULL,
  method            TEXT NOT NULL,
  method_knobs_json TEXT NOT NULL,
  dataset           TEXT NOT NULL,
  categories        TEXT NOT NULL,
  prompt_limit      INTEGER NOT NULL,
  temperature       REAL,
  top_p             REAL,
  top_k             INTEGER NOT NULL,
  seed              INTEGER NOT NULL,
  max_new_tokens    INTEGER NOT NULL,
  batch_size        INTEGER NOT NULL,
  threads           INTEGER NOT NULL,
  dtype             TEXT NOT NULL,
  device            TEXT NOT NULL,
  config_json       TEXT NOT NULL,
  wall_s            REAL,
  n_samples         INTEGER NOT NULL,
  n_steps           INTEGER NOT NULL,
  completed_at      TEXT NOT NULL
) STRICT;
CREATE UNIQUE INDEX cases_by_key ON cases(case_key);
CREATE INDEX cases_by_run ON cases(run_id);

CREATE TABLE samples (
  sample_id       INTEGER PRIMARY KEY,
  case_id         INTEGER NOT NULL REFERENCES cases(case_id),
  prompt_id       TEXT NOT NULL,
  turn            INTEGER NOT NULL,
  category        TEXT NOT NULL,
  n_prompt_tokens INTEGER NOT NULL,
  n_output_tokens INTEGER NOT NULL,
  prefill_ms      REAL,
  decode_ms       REAL,
  n_steps         INTEGER NOT NULL,
  stop_reason     TEXT NOT NULL,
  output_hash     TEXT NOT NULL,
  output_text     TEXT NOT NULL,
  output_ids_json TEXT NOT NULL
) STRICT;
CREATE UNIQUE INDEX samples_by_case ON samples(case_id, prompt_id, turn);

CREATE TABLE steps (
  step_id     INTEGER PRIMARY KEY,
  case_id     INTEGER NOT NULL REFERENCES cases(case_id),
  sample_id   INTEGER NOT NULL REFERENCES samples(sample_id),
  step_idx    INTEGER NOT NULL,
  n_drafted   INTEGER NOT NULL,
  n_accepted  INTEGER NOT NULL,
  n_emitted   INTEGER NOT NULL,
  t_draft_us  REAL,
  t_verify_us REAL,
  t_other_us  REAL
) STRICT;
CREATE UNIQUE INDEX steps_by_sample ON steps(sample_id, step_idx);
CREATE INDEX steps_by_case ON steps(case_id);

CREATE TABLE bench (
  bench_id            INTEGER PRIMARY KEY,
  run_id              INTEGER NOT NULL REFERENCES runs(run_id),
  model               TEXT NOT NULL,
  dtype               TEXT NOT NULL,
  threads             INTEGER NOT NULL,
  batch_size          INTEGER NOT NULL,
  context_len         INTEGER NOT NULL,
  n_tokens            INTEGER NOT NULL,
  reps                INTEGER NOT NULL,
  tokens_per_s        REAL,
  tokens_per_s_std    REAL,
  ms_per_step         REAL,
  forward_ms_per_step REAL,
  other_ms_per_step   REAL,
  n_params            INTEGER NOT NULL
) STRICT;
CREATE INDEX bench_by_run ON bench(run_id);

CREATE VIEW steps_v AS
  SELECT st.*, s.prompt_id, s.turn FROM steps st JOIN samples s USING (sample_id);

CREATE TRIGGER runs_no_update BEFORE UPDATE ON runs
  BEGIN SELECT RAISE(ABORT, 'specbed results are append-only'); END;
CREATE TRIGGER runs_no_delete BEFORE DELETE ON runs
  BEGIN SELECT RAISE(ABORT, 'specbed results are append-only'); END;
CREATE TRIGGER cases_no_update BEFORE UPDATE ON cases
  BEGIN SELECT RAISE(ABORT, 'specbed results are append-only'); END;
CREATE TRIGGER cases_no_delete BEFORE DELETE ON cases
  BEGIN SELECT RAISE(ABORT, 'specbed results are append-only'); END;
CREATE TRIGGER samples_no_update BEFORE UPDATE ON samples
  BEGIN SELECT RAISE(ABORT, 'specbed results are append-only'); END;
CREATE TRIGGER samples_no_delete BEFORE DELETE ON samples
  BEGIN SELECT RAISE(ABORT, 'specbed results are append-only'); END;
CREATE TRIGGER steps_no_update BEFORE UPDATE ON steps
  BEGIN SELECT RAISE(ABORT, 'specbed results are append-only'); END;
CREATE TRIGGER steps_no_delete BEFORE DELETE ON steps
  BEGIN SELECT RAISE(ABORT, 'specbed results are append-only'); END;
CREATE TRIGGER bench_no_update BEFORE UPDATE ON bench
  BEGIN SELECT RAISE(ABORT, 'specbed results are append-only'); END;
CREATE TRIGGER bench_no_delete BEFORE DELETE ON bench
  BEGIN SELECT RAISE(ABORT, 'specbed results are append-only'); END;
)sql";

// Schema migrations: kMigrations[v - 1] upgrades version v to v + 1. A new database is created by
// running kSchemaV1 and then every migration, so new and migrated files have the same schema.
// Migrations may only add tables/columns/indexes (stored results are never rewritten); added
// columns carry defaults that mean "not recorded" for the rows written before.
constexpr const char* kMigrations[] = {
    // 1 -> 2: losslessness diagnostics, tree depth and rollback events, method identity.
    R"sql(
ALTER TABLE samples ADD COLUMN token_margins_json TEXT NOT NULL DEFAULT '';
ALTER TABLE steps ADD COLUMN draft_depth INTEGER NOT NULL DEFAULT -1;
ALTER TABLE steps ADD COLUMN n_rollback_events INTEGER NOT NULL DEFAULT 0;
ALTER TABLE cases ADD COLUMN method_traits_json TEXT NOT NULL DEFAULT '';
ALTER TABLE cases ADD COLUMN drafter TEXT NOT NULL DEFAULT '';
)sql",
    // 2 -> 3: online-adaptation time per step (OSD), drafter training logs (loss curves).
    // Training logs are bookkeeping, not results: a resumed training run replaces the rows past
    // its last checkpoint, so these tables carry no append-only triggers.
    R"sql(
ALTER TABLE steps ADD COLUMN t_adapt_us REAL NOT NULL DEFAULT 0;
CREATE TABLE train_runs (
  train_id INTEGER PRIMARY KEY,
  train_key TEXT NOT NULL UNIQUE,
  task TEXT NOT NULL,
  out_dir TEXT NOT NULL,
  settings_json TEXT NOT NULL,
  started_at TEXT NOT NULL,
  finished_at TEXT NOT NULL DEFAULT '',
  summary_json TEXT NOT NULL DEFAULT ''
);
CREATE TABLE train_log (
  train_id INTEGER NOT NULL REFERENCES train_runs(train_id),
  step INTEGER NOT NULL CHECK (step >= 1),
  loss REAL,
  lr REAL NOT NULL,
  grad_norm REAL,
  elapsed_s REAL NOT NULL,
  PRIMARY KEY (train_id, step)
);
CREATE TABLE train_eval (
  train_id INTEGER NOT NULL REFERENCES train_runs(train_id),
  step INTEGER NOT NULL CHECK (step >= 0),
  val_loss REAL,
  acceptance_proxy REAL,
  metrics_json TEXT NOT NULL DEFAULT '{}',
  PRIMARY KEY (train_id, step)
);
)sql",
    // 3 -> 4: paired timing (the AR run timed back to back with each answer) and the case's
    // timing mode. The paired columns are NULL for samples timed per case.
    R"sql(
ALTER TABLE cases ADD COLUMN timing_mode TEXT NOT NULL DEFAULT '';
ALTER TABLE samples ADD COLUMN paired_ar_decode_ms REAL;
ALTER TABLE samples ADD COLUMN paired_ar_output_tokens INTEGER;
ALTER TABLE samples ADD COLUMN paired_ar_first INTEGER;
)sql",
    // 4 -> 5: `specbed bench` memory roofline columns, verify-width curve and STREAM bandwidth.
    R"sql(
ALTER TABLE bench ADD COLUMN weight_bytes INTEGER NOT NULL DEFAULT -1;
ALTER TABLE bench ADD COLUMN bandwidth_gb_s REAL;
ALTER TABLE bench ADD COLUMN roofline_fraction REAL;
ALTER TABLE bench ADD COLUMN blas_core TEXT NOT NULL DEFAULT '';
CREATE TABLE bench_verify (
  bench_verify_id INTEGER PRIMARY KEY,
  run_id          INTEGER NOT NULL REFERENCES runs(run_id),
  model           TEXT NOT NULL,
  dtype           TEXT NOT NULL,
  threads         INTEGER NOT NULL,
  batch_size      INTEGER NOT NULL,
  context_len     INTEGER NOT NULL,
  n_query         INTEGER NOT NULL,
  reps            INTEGER NOT NULL,
  forward_ms      REAL,
  ratio_to_one    REAL,
  gemv_max_rows   INTEGER NOT NULL,
  blas_core       TEXT NOT NULL
) STRICT;
CREATE INDEX bench_verify_by_run ON bench_verify(run_id);
CREATE TABLE bench_bandwidth (
  bandwidth_id INTEGER PRIMARY KEY,
  run_id       INTEGER NOT NULL REFERENCES runs(run_id),
  threads      INTEGER NOT NULL,
  array_bytes  INTEGER NOT NULL,
  reps         INTEGER NOT NULL,
  copy_gb_s    REAL,
  triad_gb_s   REAL
) STRICT;
CREATE INDEX bench_bandwidth_by_run ON bench_bandwidth(run_id);
CREATE TRIGGER bench_verify_no_update BEFORE UPDATE ON bench_verify
  BEGIN SELECT RAISE(ABORT, 'specbed results are append-only'); END;
CREATE TRIGGER bench_verify_no_delete BEFORE DELETE ON bench_verify
  BEGIN SELECT RAISE(ABORT, 'specbed results are append-only'); END;
CREATE TRIGGER bench_bandwidth_no_update BEFORE UPDATE ON bench_bandwidth
  BEGIN SELECT RAISE(ABORT, 'specbed results are append-only'); END;
CREATE TRIGGER bench_bandwidth_no_delete BEFORE DELETE ON bench_bandwidth
  BEGIN SELECT RAISE(ABORT, 'specbed results are append-only'); END;
)sql",
    // 5 -> 6: parallel draft/verify decoders (PEARL, SpecBranch): per-side busy time, target
    // forwards, rollback tokens (spec definition, discarded parallel work included) and the draft
    // tokens generated per step (-1 = not recorded: rows written before); the paired AR run's
    // prefill time (end-to-end speedups; NULL before).
    R"sql(
ALTER TABLE steps ADD COLUMN t_draft_busy_us REAL NOT NULL DEFAULT -1;
ALTER TABLE steps ADD COLUMN t_verify_busy_us REAL NOT NULL DEFAULT -1;
ALTER TABLE steps ADD COLUMN n_target_forwards INTEGER NOT NULL DEFAULT -1;
ALTER TABLE steps ADD COLUMN n_rolled_back INTEGER NOT NULL DEFAULT -1;
ALTER TABLE steps ADD COLUMN n_draft_generated INTEGER NOT NULL DEFAULT -1;
ALTER TABLE samples ADD COLUMN paired_ar_prefill_ms REAL;
)sql",
    // 6 -> 7: read-only views with the point estimates of `specbed summary` (decode scope): each
    // case's AR baseline (metrics FindArBaseline / SameWorkload), the per-answer speedup terms
    // (paired AR run when recorded, else the baseline's answer to the same prompt and turn), and
    // per case decode tok/s, τ and the speedup (geometric mean of the terms, and the ratio of
    // totals). Intervals stay in `specbed summary` / `specbed export`.
    R"sql(
-- The same-run match first: other runs' case ids are offset by 2^62 inside min() (SQLite does not
-- let a subquery's ORDER BY name the outer row).
CREATE VIEW case_baseline AS
SELECT m.case_id,
       (SELECT min(CASE WHEN a.run_id = m.run_id THEN a.case_id
                        ELSE a.case_id + 4611686018427387904 END) % 4611686018427387904
        FROM cases a
        WHERE a.method = 'ar' AND a.case_id <> m.case_id AND a.target = m.target
          AND a.dataset = m.dataset AND a.categories = m.categories
          AND a.prompt_limit = m.prompt_limit AND a.temperature = m.temperature
          AND a.top_p = m.top_p AND a.top_k = m.top_k AND a.seed = m.seed
          AND a.max_new_tokens = m.max_new_tokens AND a.batch_size = m.batch_size
          AND a.dtype = m.dtype AND a.device = m.device AND a.threads = m.threads
          AND (json_extract(CASE WHEN json_valid(a.config_json) THEN a.config_json END, '$.stop_strings') IS NULL OR json_extract(CASE WHEN json_valid(m.config_json) THEN m.config_json END, '$.stop_strings') IS NULL OR json_extract(CASE WHEN json_valid(a.config_json) THEN a.config_json END, '$.stop_strings') = json_extract(CASE WHEN json_valid(m.config_json) THEN m.config_json END, '$.stop_strings')) AND (json_extract(CASE WHEN json_valid(a.config_json) THEN a.config_json END, '$.chat_template') IS NULL OR json_extract(CASE WHEN json_valid(m.config_json) THEN m.config_json END, '$.chat_template') IS NULL OR json_extract(CASE WHEN json_valid(a.config_json) THEN a.config_json END, '$.chat_template') = json_extract(CASE WHEN json_valid(m.config_json) THEN m.config_json END, '$.chat_template')) AND (json_extract(CASE WHEN json_valid(a.config_json) THEN a.config_json END, '$.system_prompt') IS NULL OR json_extract(CASE WHEN json_valid(m.config_json) THEN m.config_json END, '$.system_prompt') IS NULL OR json_extract(CASE WHEN json_valid(a.config_json) THEN a.config_json END, '$.system_prompt') = json_extract(CASE WHEN json_valid(m.config_json) THEN m.config_json END, '$.system_prompt'))) AS baseline_case_id
FROM cases m WHERE m.method <> 'ar';
CREATE VIEW answer_speedup AS
WITH terms AS (
  SELECT s.case_id, s.prompt_id, s.turn, s.paired_ar_output_tokens IS NOT NULL AS paired,
         max(s.n_output_tokens - 1, 0) AS method_tokens, s.decode_ms AS method_ms,
         CASE WHEN s.paired_ar_output_tokens IS NOT NULL
              THEN max(s.paired_ar_output_tokens - 1, 0) ELSE max(a.n_output_tokens - 1, 0)
         END AS ar_tokens,
         CASE WHEN s.paired_ar_output_tokens IS NOT NULL THEN s.paired_ar_decode_ms
              ELSE a.decode_ms END AS ar_ms
  FROM samples s JOIN cases c ON c.case_id = s.case_id AND c.method <> 'ar'
  LEFT JOIN case_baseline b ON b.case_id = s.case_id
  LEFT JOIN samples a ON s.paired_ar_output_tokens IS NULL AND a.case_id = b.baseline_case_id
                     AND a.prompt_id = s.prompt_id AND a.turn = s.turn)
SELECT case_id, prompt_id, turn, paired, method_tokens, method_ms, ar_tokens, ar_ms,
       (method_tokens * 1.0 / method_ms) / (ar_tokens * 1.0 / ar_ms) AS ratio
FROM terms
WHERE method_ms > 0 AND ar_ms > 0 AND method_tokens > 0 AND ar_tokens > 0;
CREATE VIEW case_summary AS
SELECT c.case_id, c.run_id, c.method, c.method_knobs_json, c.target, c.dataset, c.temperature,
       (SELECT sum(max(n_output_tokens - 1, 0)) * 1000.0 / nullif(sum(decode_ms), 0)
        FROM samples WHERE case_id = c.case_id) AS decode_tok_per_s,
       (SELECT sum(n_emitted) * 1.0 / nullif(count(*), 0) FROM steps WHERE case_id = c.case_id)
         AS tau,
       b.baseline_case_id,
       (SELECT exp(avg(ln(ratio))) FROM answer_speedup WHERE case_id = c.case_id) AS speedup,
       (SELECT (sum(method_tokens) * 1.0 / sum(method_ms)) / (sum(ar_tokens) * 1.0 / sum(ar_ms))
        FROM answer_speedup WHERE case_id = c.case_id) AS speedup_total_ratio,
       (SELECT count(*) FROM answer_speedup WHERE case_id = c.case_id) AS n_matched
FROM cases c LEFT JOIN case_baseline b ON b.case_id = c.case_id;
)sql",
    // 7 -> 8: case_baseline follows metrics BaselinePolicy's default: an AR case of the same run,
    // else of another run on the same machine (runs.host / cpu / gpu); never one measured on
    // another machine (`--cross-machine-baseline` asks for that in summary / report / export).
    // Sharded sweeps run each shard's AR with its method cases (ShardCases), so none is needed.
    R"sql(
DROP VIEW case_baseline;
CREATE VIEW case_baseline AS
SELECT m.case_id,
       (SELECT min(CASE WHEN a.run_id = m.run_id THEN a.case_id
                        ELSE a.case_id + 4611686018427387904 END) % 4611686018427387904
        FROM cases a
        WHERE a.method = 'ar' AND a.case_id <> m.case_id AND a.target = m.target
          AND a.dataset = m.dataset AND a.categories = m.categories
          AND a.prompt_limit = m.prompt_limit AND a.temperature = m.temperature
          AND a.top_p = m.top_p AND a.top_k = m.top_k AND a.seed = m.seed
          AND a.max_new_tokens = m.max_new_tokens AND a.batch_size = m.batch_size
          AND a.dtype = m.dtype AND a.device = m.device AND a.threads = m.threads
          AND (a.run_id = m.run_id
               OR (SELECT host || ' / ' || cpu || ' / ' || gpu FROM runs WHERE run_id = a.run_id)
                  IS (SELECT host || ' / ' || cpu || ' / ' || gpu FROM runs WHERE run_id = m.run_id))
          AND (json_extract(CASE WHEN json_valid(a.config_json) THEN a.config_json END, '$.stop_strings') IS NULL OR json_extract(CASE WHEN json_valid(m.config_json) THEN m.config_json END, '$.stop_strings') IS NULL OR json_extract(CASE WHEN json_valid(a.config_json) THEN a.config_json END, '$.stop_strings') = json_extract(CASE WHEN json_valid(m.config_json) THEN m.config_json END, '$.stop_strings')) AND (json_extract(CASE WHEN json_valid(a.config_json) THEN a.config_json END, '$.chat_template') IS NULL OR json_extract(CASE WHEN json_valid(m.config_json) THEN m.config_json END, '$.chat_template') IS NULL OR json_extract(CASE WHEN json_valid(a.config_json) THEN a.config_json END, '$.chat_template') = json_extract(CASE WHEN json_valid(m.config_json) THEN m.config_json END, '$.chat_template')) AND (json_extract(CASE WHEN json_valid(a.config_json) THEN a.config_json END, '$.system_prompt') IS NULL OR json_extract(CASE WHEN json_valid(m.config_json) THEN m.config_json END, '$.system_prompt') IS NULL OR json_extract(CASE WHEN json_valid(a.config_json) THEN a.config_json END, '$.system_prompt') = json_extract(CASE WHEN json_valid(m.config_json) THEN m.config_json END, '$.system_prompt'))) AS baseline_case_id
FROM cases m WHERE m.method <> 'ar';
)sql",
    // 8 -> 9: vLLM's metric names beside SpecBed's (metrics/vllm_metrics.h): case_summary gains
    // acceptance_rate (accepted / drafted tokens) and mean_acceptance_length (1 + accepted /
    // steps); position_acceptance has one row per case and draft position with r, alpha and
    // vLLM's per_position_acceptance_rate (steps accepted up to the position / all steps).
    R"sql(
DROP VIEW case_summary;
CREATE VIEW case_summary AS
SELECT c.case_id, c.run_id, c.method, c.method_knobs_json, c.target, c.dataset, c.temperature,
       (SELECT sum(max(n_output_tokens - 1, 0)) * 1000.0 / nullif(sum(decode_ms), 0)
        FROM samples WHERE case_id = c.case_id) AS decode_tok_per_s,
       (SELECT sum(n_emitted) * 1.0 / nullif(count(*), 0) FROM steps WHERE case_id = c.case_id)
         AS tau,
       b.baseline_case_id,
       (SELECT exp(avg(ln(ratio))) FROM answer_speedup WHERE case_id = c.case_id) AS speedup,
       (SELECT (sum(method_tokens) * 1.0 / sum(method_ms)) / (sum(ar_tokens) * 1.0 / sum(ar_ms))
        FROM answer_speedup WHERE case_id = c.case_id) AS speedup_total_ratio,
       (SELECT count(*) FROM answer_speedup WHERE case_id = c.case_id) AS n_matched,
       (SELECT sum(n_accepted) * 1.0 / nullif(sum(n_drafted), 0) FROM steps
        WHERE case_id = c.case_id) AS acceptance_rate,
       (SELECT 1 + sum(n_accepted) * 1.0 / nullif(count(*), 0) FROM steps
        WHERE case_id = c.case_id) AS mean_acceptance_length
FROM cases c LEFT JOIN case_baseline b ON b.case_id = c.case_id;
CREATE VIEW position_acceptance AS
WITH RECURSIVE pos(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM pos WHERE i < 1024),
st AS (SELECT case_id, n_accepted AS a,
              CASE WHEN draft_depth < 0 THEN n_drafted ELSE draft_depth END AS d FROM steps)
SELECT st.case_id, pos.i AS position,
       sum(st.a >= pos.i) * 1.0 / count(*) AS r,
       sum(st.a >= pos.i) * 1.0 / nullif(sum(st.a >= pos.i - 1), 0) AS alpha,
       sum(st.a >= pos.i) * 1.0 / (SELECT count(*) FROM steps x WHERE x.case_id = st.case_id)
         AS per_position_acceptance_rate
FROM st JOIN pos ON pos.i <= st.d
GROUP BY st.case_id, pos.i;
)sql",
    // 9 -> 10: the rollback rate's trimmed positions (parallel decoders) and the drafter prefill
    // phase (its catch-up over the prompt) per step; -1 = not recorded (rows written before).
    R"sql(
ALTER TABLE steps ADD COLUMN n_trimmed INTEGER NOT NULL DEFAULT -1;
ALTER TABLE steps ADD COLUMN t_draft_prefill_us REAL NOT NULL DEFAULT -1;
)sql",
    // 10 -> 11: the CPU kernels a bench row ran (models/gemv.h kernel, '' = not recorded) and the
    // bytes of its streamed weights in huge pages (models/weight_arena.h; -1 = not recorded).
    R"sql(
ALTER TABLE bench ADD COLUMN gemv_kernel TEXT NOT NULL DEFAULT '';
ALTER TABLE bench ADD COLUMN huge_page_bytes INTEGER NOT NULL DEFAULT -1;
ALTER TABLE bench_verify ADD COLUMN gemv_kernel TEXT NOT NULL DEFAULT '';
)sql",
};
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == kFirstGeneratedVersion - 2,
              "hand-written migrations end at kFirstGeneratedVersion - 1");

}  // namespace

const char* const kSchemaV1 = kSchemaV1Ddl;

// The hand-written migration up to kFirstGeneratedVersion - 1, then the tables and columns the
// field tables add (record_schema.h; version 14: the serve tables).
std::string MigrationSql(int v) {
  if (v + 1 < kFirstGeneratedVersion) return kMigrations[v - 1];
  return GeneratedMigrationSql(v + 1);
}

}  // namespace specbed
