// The SpecBed results store on SQLite: schema creation/versioning/migration, WAL setup, the
// append-only write path (one transaction per case, reused prepared statements) and the read side.
// Checked by: tests/results/store_test.cpp.
#include "results/store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <type_traits>
#include <utility>

#include "harness/base/error.h"
#include "harness/base/mapped_file.h"
#include "harness/base/names.h"
#include "harness/base/timer.h"

namespace specbed {
namespace {

// Schema version 1. Keep every column documented in results/README.md (a test checks it).
// REAL columns are nullable only so that NaN (which SQLite stores as NULL) round-trips.
constexpr const char* kSchemaV1 = R"sql(
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
static_assert(sizeof(kMigrations) / sizeof(kMigrations[0]) == kResultsSchemaVersion - 1,
              "one migration per schema version step");

constexpr const char* kFormatName = "specbed_results";

const std::vector<std::string> kTables = {"runs",       "cases",        "samples",         "steps",
                                          "bench",      "bench_verify", "bench_bandwidth", "meta",
                                          "train_runs", "train_log",    "train_eval"};
const std::vector<std::string> kDtypes = {"float32", "bfloat16", "float16"};
const std::vector<std::string> kDevices = {"cpu", "cuda", "cuda:N"};
const std::vector<std::string> kStopReasons = {"eos", "max_new_tokens", "stop_string",
                                               "max_context"};

bool Contains(const std::vector<std::string>& values, const std::string& v) {
  for (const auto& x : values)
    if (x == v) return true;
  return false;
}

// Resets a statement when the scope ends, so that no statement keeps a read transaction open.
class ResetOnExit {
 public:
  explicit ResetOnExit(sqlite3_stmt* stmt) : stmt_(stmt) {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  ~ResetOnExit() { sqlite3_reset(stmt_); }
  ResetOnExit(const ResetOnExit&) = delete;
  ResetOnExit& operator=(const ResetOnExit&) = delete;

 private:
  sqlite3_stmt* stmt_;
};

// Owns a statement that is used once.
class OwnedStmt {
 public:
  explicit OwnedStmt(sqlite3_stmt* stmt) : stmt_(stmt) {}
  ~OwnedStmt() { sqlite3_finalize(stmt_); }
  OwnedStmt(const OwnedStmt&) = delete;
  OwnedStmt& operator=(const OwnedStmt&) = delete;
  sqlite3_stmt* get() const { return stmt_; }

 private:
  sqlite3_stmt* stmt_;
};

std::string ColText(sqlite3_stmt* s, int i) {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s, i));
  const int n = sqlite3_column_bytes(s, i);
  return p ? std::string(p, static_cast<size_t>(n)) : std::string();
}

double ColReal(sqlite3_stmt* s, int i) {
  if (sqlite3_column_type(s, i) == SQLITE_NULL) return std::numeric_limits<double>::quiet_NaN();
  return sqlite3_column_double(s, i);
}

int64_t ColInt(sqlite3_stmt* s, int i) {
  return sqlite3_column_int64(s, i);
}

std::string DirName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Whether this process may create files in `dir` (effective ids, as open() checks).
bool DirWritable(const std::string& dir) {
  return faccessat(AT_FDCWD, dir.c_str(), W_OK | X_OK, AT_EACCESS) == 0;
}

// Why a database file could not be opened/created, in words.
std::string DescribeOpenFailure(const std::string& path, sqlite3* db) {
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return "it is a directory";
  const std::string dir = DirName(path);
  if (stat(dir.c_str(), &st) != 0) {
    if (errno == ENOTDIR) return "a parent of '" + dir + "' is not a directory";
    return "directory '" + dir + "' does not exist";
  }
  if (!S_ISDIR(st.st_mode)) return "'" + dir + "' is not a directory";
  if (stat(path.c_str(), &st) != 0 && !DirWritable(dir)) {
    return "folder '" + dir + "' is not writable (permission denied creating the file in it)";
  }
  std::string reason = db ? sqlite3_errmsg(db) : "out of memory";
  const int sys_errno = db ? sqlite3_system_errno(db) : 0;
  if (sys_errno != 0) reason += StrCat(" (", std::strerror(sys_errno), ")");
  return reason;
}

}  // namespace

std::string SqliteLibraryVersion() {
  return sqlite3_libversion();
}

ResultsStore::ResultsStore(const std::string& path, const StoreOptions& options)
    : path_(path), options_(options) {}

ResultsStore::~ResultsStore() {
  for (sqlite3_stmt* s : {insert_run_, insert_case_, insert_sample_, insert_step_, insert_bench_,
                          find_case_, find_run_}) {
    sqlite3_finalize(s);
  }
  if (db_ != nullptr) {
    if (sqlite3_get_autocommit(db_) == 0) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_close_v2(db_);
  }
}

std::unique_ptr<ResultsStore> ResultsStore::Open(const std::string& path,
                                                 const StoreOptions& options) {
  SPECBED_CHECK(!path.empty(), "results database path is empty");
  SPECBED_CHECK(options.busy_timeout_ms >= 0, "results database '", path,
                "': busy_timeout_ms must be >= 0, got ", options.busy_timeout_ms);
  std::unique_ptr<ResultsStore> store(new ResultsStore(path, options));
  store->Init();
  return store;
}

[[noreturn]] void ResultsStore::FailSqlite(int rc, const std::string& op) const {
  const int primary = rc & 0xff;
  const std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) {
    const int64_t waited_ms = (NowMicros() - op_start_us_) / 1000;
    Fail("results database '", path_, "' is locked by another process (waited ", waited_ms,
         " ms); another specbed run may be writing to it: wait for it to finish, write to a "
         "different results file, or raise the busy timeout (while ",
         op, ")");
  }
  if (primary == SQLITE_NOTADB) {
    Fail("'", path_, "' is not a SQLite database (", msg,
         "); pass a SpecBed results database or a path for a new one");
  }
  if (primary == SQLITE_READONLY) {
    // SQLite writes a journal next to the database: a writable file in a read-only folder fails
    // here too, and the fix is the folder's permissions, not the file's.
    const std::string dir = DirName(path_);
    if (rc == SQLITE_READONLY_DIRECTORY || !DirWritable(dir)) {
      Fail("results database '", path_, "' cannot be written: its folder '", dir,
           "' is not writable, and SQLite must create a journal file next to the database (", msg,
           ") while ", op, "; make the folder writable or write the results elsewhere");
    }
    Fail("results database '", path_, "' is not writable (", msg, ") while ", op);
  }
  std::string detail = msg;
  if (primary == SQLITE_IOERR || primary == SQLITE_CANTOPEN || primary == SQLITE_FULL) {
    const int sys_errno = db_ ? sqlite3_system_errno(db_) : 0;
    if (sys_errno != 0) detail += StrCat(" (", std::strerror(sys_errno), ")");
  }
  Fail("results database '", path_, "': ", op, " failed: ", detail);
}

void ResultsStore::Exec(const char* sql, const std::string& op) const {
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) FailSqlite(rc, op);
}

sqlite3_stmt* ResultsStore::Prepare(const char* sql) const {
  sqlite3_stmt* stmt = nullptr;
  const int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    FailSqlite(rc, StrCat("preparing '", sql, "'"));
  }
  return stmt;
}

sqlite3_stmt* ResultsStore::Cached(sqlite3_stmt** slot, const char* sql) const {
  if (*slot == nullptr) *slot = Prepare(sql);
  return *slot;
}

namespace {

// True when the schema of an open database can be read (false e.g. for a WAL database whose
// -shm file cannot be created).
bool CanReadSchema(sqlite3* db) {
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db, "SELECT count(*) FROM sqlite_schema", -1, &raw, nullptr) !=
      SQLITE_OK) {
    sqlite3_finalize(raw);
    return false;
  }
  const int rc = sqlite3_step(raw);
  sqlite3_finalize(raw);
  return rc == SQLITE_ROW;
}

// "file:/path%3Fwith%23odd?immutable=1": a URI for `path` (percent-encoding what URIs reserve).
std::string ImmutableUri(const std::string& path) {
  std::string uri = "file:";
  for (unsigned char c : path) {
    if (c == '%' || c == '?' || c == '#' || c < 0x20 || c >= 0x7f) {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      uri += buf;
    } else {
      uri += static_cast<char>(c);
    }
  }
  return uri + "?immutable=1";
}

// A WAL database on a read-only medium (or where its -shm file cannot be created): SQLite needs
// the -shm file even to read. Closes `db` and reopens `path` immutable (no locks, no -shm), which
// reads the main file as it is; un-checkpointed -wal content is not seen (specbed checkpoints on
// close, so a finished run has none).
sqlite3* ReopenImmutable(sqlite3* db, const std::string& path) {
  sqlite3_close_v2(db);
  sqlite3* reopened = nullptr;
  if (sqlite3_open_v2(ImmutableUri(path).c_str(), &reopened, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI,
                      nullptr) != SQLITE_OK) {
    const std::string reason = DescribeOpenFailure(path, reopened);
    sqlite3_close_v2(reopened);
    Fail("cannot open results database '", path, "' read-only: ", reason);
  }
  return reopened;
}

// sqlite3_step, retried every 10 ms while SQLite answers BUSY / LOCKED without calling the busy
// handler (the switch to WAL mode takes an exclusive lock that way) until `deadline_us`.
int StepRetryingWhileBusy(sqlite3_stmt* stmt, int64_t deadline_us) {
  int rc = sqlite3_step(stmt);
  while (((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED) &&
         NowMicros() < deadline_us) {
    sqlite3_reset(stmt);
    sqlite3_sleep(10);
    rc = sqlite3_step(stmt);
  }
  return rc;
}

// The meta table's format name into `format` ("" when the file has no meta table); SQLITE_OK or
// the failing result code.
int ReadFormatName(sqlite3* db, std::string* format) {
  sqlite3_stmt* raw = nullptr;
  const int prc =
      sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'format'", -1, &raw, nullptr);
  OwnedStmt s(raw);
  format->clear();
  if (prc != SQLITE_OK) return (prc & 0xff) == SQLITE_ERROR ? SQLITE_OK : prc;  // ERROR: no table
  const int step_rc = sqlite3_step(s.get());
  if (step_rc == SQLITE_ROW) *format = ColText(s.get(), 0);
  return step_rc == SQLITE_ROW || step_rc == SQLITE_DONE ? SQLITE_OK : step_rc;
}

}  // namespace

void ResultsStore::Init() {
  op_start_us_ = NowMicros();
  struct stat st {};
  const bool existed = stat(path_.c_str(), &st) == 0;
  if (options_.read_only) {
    SPECBED_CHECK(existed, "results database '", path_, "' does not exist");
  }
  if (existed && !S_ISREG(st.st_mode)) CheckPathKind(path_, PathKind::kFile, "results database");
  const int flags =
      options_.read_only ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  const int rc = sqlite3_open_v2(path_.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    const std::string reason = DescribeOpenFailure(path_, db_);
    Fail(existed ? "cannot open" : "cannot create", " results database '", path_, "': ", reason);
  }
  if (options_.read_only && !CanReadSchema(db_)) db_ = ReopenImmutable(db_, path_);
  if (!options_.read_only && sqlite3_db_readonly(db_, "main") == 1) {
    Fail("cannot open results database '", path_,
         "' for writing: permission denied (it can still be opened read-only)");
  }
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, options_.busy_timeout_ms);
  Exec("PRAGMA foreign_keys = ON", "enabling foreign keys");

  // Identify the file before changing anything in it.
  auto read_user_version = [&]() {
    OwnedStmt s(Prepare("PRAGMA user_version"));
    const int step_rc = sqlite3_step(s.get());
    if (step_rc != SQLITE_ROW) FailSqlite(step_rc, "reading the schema version");
    return static_cast<int>(sqlite3_column_int(s.get(), 0));
  };
  auto count_schema_objects = [&]() {
    OwnedStmt s(Prepare("SELECT count(*) FROM sqlite_schema"));
    const int step_rc = sqlite3_step(s.get());
    if (step_rc != SQLITE_ROW) FailSqlite(step_rc, "reading the schema");
    return ColInt(s.get(), 0);
  };
  auto check_format = [&]() {
    std::string format;
    const int rc = ReadFormatName(db_, &format);
    if (rc != SQLITE_OK) FailSqlite(rc, "reading the meta table");
    SPECBED_CHECK(format == kFormatName, "'", path_,
                  "' is a SQLite database but not a SpecBed results database (no meta row "
                  "format = '",
                  kFormatName, "'); pass a SpecBed results database or a path for a new one");
  };

  int version = read_user_version();
  if (version == 0) {
    SPECBED_CHECK(count_schema_objects() == 0, "'", path_,
                  "' is a SQLite database but not a SpecBed results database (it has tables "
                  "and schema version 0); pass a SpecBed results database or a path for a new "
                  "one");
    SPECBED_CHECK(!options_.read_only, "results database '", path_,
                  "' is empty (no SpecBed results schema)");
  } else {
    check_format();
    SPECBED_CHECK(version <= kResultsSchemaVersion, "results database '", path_,
                  "' has schema version ", version, ", newer than this build of specbed supports (",
                  kResultsSchemaVersion, "); use a newer specbed build or another results file");
    // A read-only open of an older version reads it as it is (see the Load*/List* queries).
  }

  if (!options_.read_only) {
    {
      // Two runs starting on a new database: retried for the busy timeout, not failed at once.
      OwnedStmt s(Prepare("PRAGMA journal_mode = WAL"));
      const int step_rc =
          StepRetryingWhileBusy(s.get(), op_start_us_ + options_.busy_timeout_ms * 1000LL);
      if (step_rc != SQLITE_ROW) FailSqlite(step_rc, "switching to WAL mode");
      const std::string mode = ColText(s.get(), 0);
      SPECBED_CHECK(mode == "wal", "results database '", path_,
                    "': could not switch to WAL journal mode (got '", mode, "')");
    }
    Exec("PRAGMA synchronous = NORMAL", "setting synchronous = NORMAL");
    Exec("PRAGMA cache_size = -65536", "setting the page cache size");
    if (version < kResultsSchemaVersion) {
      Begin("creating or migrating the schema");
      try {
        // Re-read inside the write transaction: another process may have done it meanwhile.
        version = read_user_version();
        SPECBED_CHECK(version <= kResultsSchemaVersion, "results database '", path_,
                      "' has schema version ", version,
                      ", newer than this build of specbed supports (", kResultsSchemaVersion,
                      "); use a newer specbed build or another results file");
        if (version == 0) {
          SPECBED_CHECK(count_schema_objects() == 0, "'", path_,
                        "' is a SQLite database but not a SpecBed results database");
          InitSchema();
        } else if (version < kResultsSchemaVersion) {
          MigrateSchema(version);
        }
        Commit("creating or migrating the schema");
      } catch (...) {
        RollbackQuietly();
        throw;
      }
      version = kResultsSchemaVersion;
    }
  }
  schema_version_ = version;
}

void ResultsStore::InitSchema() {
  Exec(kSchemaV1, "creating the schema");
  for (int v = 1; v < kResultsSchemaVersion; ++v) {
    Exec(kMigrations[v - 1], StrCat("creating the schema (version ", v, " -> ", v + 1, ")"));
  }
  OwnedStmt s(Prepare("INSERT INTO meta(key, value) VALUES (?1, ?2)"));
  const std::vector<std::pair<std::string, std::string>> rows = {
      {"format", kFormatName},
      {"schema_version", std::to_string(kResultsSchemaVersion)},
      {"created_at", NowRfc3339()},
      {"created_with_sqlite", sqlite3_libversion()}};
  for (const auto& [key, value] : rows) {
    sqlite3_reset(s.get());
    sqlite3_bind_text(s.get(), 1, key.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s.get(), 2, value.c_str(), -1, SQLITE_TRANSIENT);
    const int rc = sqlite3_step(s.get());
    if (rc != SQLITE_DONE) FailSqlite(rc, "writing the meta table");
  }
  Exec(StrCat("PRAGMA user_version = ", kResultsSchemaVersion).c_str(),
       "setting the schema version");
}

// Migration hook: upgrades a database from `from_version` to kResultsSchemaVersion, one version
// at a time (kMigrations), inside the caller's write transaction. Add a kMigrations entry per
// schema change. Migrations may only add tables/columns/indexes: stored results are never
// rewritten.
void ResultsStore::MigrateSchema(int from_version) {
  SPECBED_CHECK(from_version >= 1, "results database '", path_, "' has schema version ",
                from_version, ", which this build of specbed cannot migrate to ",
                kResultsSchemaVersion);
  for (int v = from_version; v < kResultsSchemaVersion; ++v) {
    Exec(kMigrations[v - 1],
         StrCat("migrating results database '", path_, "' from schema version ", v, " to ", v + 1));
  }
  Exec(StrCat("INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', '",
              kResultsSchemaVersion, "')")
           .c_str(),
       "updating the meta table");
  Exec(StrCat("PRAGMA user_version = ", kResultsSchemaVersion).c_str(),
       "setting the schema version");
}

void ResultsStore::CheckWritable() const {
  SPECBED_CHECK(!options_.read_only, "results database '", path_,
                "' was opened read-only; cannot write to it");
}

void ResultsStore::Begin(const char* op) {
  op_start_us_ = NowMicros();
  // IMMEDIATE takes the write lock up front, so waiting for another writer goes through the busy
  // timeout instead of failing later on a read-to-write upgrade.
  Exec("BEGIN IMMEDIATE", op);
}

void ResultsStore::Commit(const char* op) {
  Exec("COMMIT", op);
}

void ResultsStore::RollbackQuietly() noexcept {
  if (db_ != nullptr && sqlite3_get_autocommit(db_) == 0) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
}

void ResultsStore::InTransaction(const char* op, const std::function<void()>& body) {
  Begin(op);
  try {
    body();
    Commit(op);
  } catch (...) {
    RollbackQuietly();
    throw;
  }
}

void ResultsStore::ForEachRow(sqlite3_stmt* s, const std::string& what,
                              const std::function<void(sqlite3_stmt*)>& row) const {
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) row(s);
  if (rc != SQLITE_DONE) FailSqlite(rc, what);
}

namespace {

// Binding helpers; all strings are bound without copying (they outlive the step).
void BindText(sqlite3_stmt* s, int i, const std::string& v) {
  sqlite3_bind_text64(s, i, v.data(), v.size(), SQLITE_STATIC, SQLITE_UTF8);
}
void BindInt(sqlite3_stmt* s, int i, int64_t v) {
  sqlite3_bind_int64(s, i, v);
}
void BindReal(sqlite3_stmt* s, int i, double v) {
  if (std::isnan(v)) {
    sqlite3_bind_null(s, i);
  } else {
    sqlite3_bind_double(s, i, v);
  }
}

// Binds `values` to parameters first, first + 1, ... in order: integers as INTEGER, floating
// point as REAL (NaN as NULL), strings as TEXT (not copied).
template <typename... T>
void BindAll(sqlite3_stmt* s, int first, const T&... values) {
  int i = first;
  auto bind = [&](const auto& v) {
    using V = std::decay_t<decltype(v)>;
    if constexpr (std::is_integral_v<V>) {
      BindInt(s, i++, static_cast<int64_t>(v));
    } else if constexpr (std::is_floating_point_v<V>) {
      BindReal(s, i++, static_cast<double>(v));
    } else {
      BindText(s, i++, v);
    }
  };
  (bind(values), ...);
}

// Reads columns first, first + 1, ... into `fields` in order: integers as INTEGER, floating
// point as REAL (NULL as NaN), strings as TEXT.
template <typename... T>
void ReadAll(sqlite3_stmt* s, int first, T&... fields) {
  int i = first;
  auto read = [&](auto& field) {
    using V = std::decay_t<decltype(field)>;
    if constexpr (std::is_integral_v<V>) {
      field = static_cast<V>(ColInt(s, i++));
    } else if constexpr (std::is_floating_point_v<V>) {
      field = static_cast<V>(ColReal(s, i++));
    } else {
      field = ColText(s, i++);
    }
  };
  (read(fields), ...);
}

int64_t SeedToInt(uint64_t seed) {
  int64_t out;
  std::memcpy(&out, &seed, sizeof(out));
  return out;
}
uint64_t IntToSeed(int64_t v) {
  uint64_t out;
  std::memcpy(&out, &v, sizeof(out));
  return out;
}

}  // namespace

int64_t ResultsStore::BeginRun(const RunInfo& run) {
  CheckWritable();
  sqlite3_stmt* s = Cached(&insert_run_,
                           "INSERT INTO runs(started_at, specbed_version, git_commit, build_flags, "
                           "host, cpu, gpu, library_versions_json, config_json, repro_command) "
                           "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)");
  int64_t run_id = 0;
  InTransaction("starting a run", [&] {
    ResetOnExit reset(s);
    BindAll(s, 1, run.started_at, run.specbed_version, run.git_commit, run.build_flags, run.host,
            run.cpu, run.gpu, run.library_versions_json, run.config_json, run.repro_command);
    const int rc = sqlite3_step(s);
    if (rc != SQLITE_DONE) FailSqlite(rc, "writing the runs row");
    run_id = sqlite3_last_insert_rowid(db_);
  });
  return run_id;
}

bool ResultsStore::HasCompletedCase(const std::string& case_key) const {
  op_start_us_ = NowMicros();
  return FindCase(case_key) >= 0;
}

int64_t ResultsStore::WriteCase(int64_t run_id, const CaseRecord& c,
                                const std::vector<SampleRecord>& samples,
                                const std::vector<StepRecord>& steps) {
  CheckWritable();
  ValidateCase(c, samples, steps);  // before taking the write lock
  int64_t case_id = -1;
  InTransaction("writing a case", [&] {
    // Already completed (by an earlier run or a concurrent process)? Then write nothing.
    case_id = FindCase(c.case_key);
    if (case_id >= 0) return;
    CheckRunExists(run_id, StrCat("case '", c.case_key, "'"));
    case_id = InsertCase(run_id, c, samples.size(), steps.size());
    InsertSteps(case_id, c, steps, InsertSamples(case_id, c, samples));
  });
  return case_id;
}

void ResultsStore::ValidateCase(const CaseRecord& c, const std::vector<SampleRecord>& samples,
                                const std::vector<StepRecord>& steps) const {
  SPECBED_CHECK(!c.case_key.empty(), "results database '", path_,
                "': cannot write a case with an empty case_key (target '", c.target, "', method '",
                c.method, "')");
  SPECBED_CHECK(Contains(kDtypes, c.dtype), "results database '", path_, "': case '", c.case_key,
                "' has dtype '", c.dtype, "'; expected one of: ", Join(kDtypes, ", "));
  const bool cuda_n = c.device.size() > 5 && c.device.compare(0, 5, "cuda:") == 0 &&
                      c.device.find_first_not_of("0123456789", 5) == std::string::npos;
  SPECBED_CHECK(Contains(kDevices, c.device) || cuda_n, "results database '", path_, "': case '",
                c.case_key, "' has device '", c.device,
                "'; expected one of: ", Join(kDevices, ", "));
  SPECBED_CHECK(c.timing_mode.empty() || c.timing_mode == "paired" || c.timing_mode == "per_case",
                "results database '", path_, "': case '", c.case_key, "' has timing_mode '",
                c.timing_mode, "'; expected paired, per_case or empty");
  for (const SampleRecord& sample : samples) {
    SPECBED_CHECK(
        !sample.has_paired_ar() || sample.paired_ar_first == 0 || sample.paired_ar_first == 1,
        "results database '", path_, "': case '", c.case_key, "', prompt '", sample.prompt_id,
        "' turn ", sample.turn, " has paired_ar_first ", sample.paired_ar_first,
        "; expected 0 or 1 with a paired AR run");
    SPECBED_CHECK(!sample.prompt_id.empty(), "results database '", path_, "': case '", c.case_key,
                  "' has a sample with an empty prompt_id");
    SPECBED_CHECK(Contains(kStopReasons, sample.stop_reason), "results database '", path_,
                  "': case '", c.case_key, "', prompt '", sample.prompt_id, "' turn ", sample.turn,
                  " has stop_reason '", sample.stop_reason,
                  "'; expected one of: ", Join(kStopReasons, ", "));
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    const StepRecord& st = steps[i];
    // The deepest node a step can accept: its recorded depth, or n_drafted (a chain) if unknown.
    const int64_t depth = st.draft_depth >= 0 ? st.draft_depth : st.n_drafted;
    const bool ok = st.n_drafted >= 0 && st.draft_depth >= -1 && st.draft_depth <= st.n_drafted &&
                    st.n_accepted >= 0 && st.n_accepted <= depth && st.n_emitted >= 0 &&
                    st.n_rollback_events >= 0;
    SPECBED_CHECK(ok, "results database '", path_, "': case '", c.case_key, "', step ", i,
                  " (prompt '", st.prompt_id, "' turn ", st.turn, ", step_idx ", st.step_idx,
                  ") has n_drafted ", st.n_drafted, ", draft_depth ", st.draft_depth,
                  ", n_accepted ", st.n_accepted, ", n_emitted ", st.n_emitted,
                  ", n_rollback_events ", st.n_rollback_events,
                  "; expected 0 <= n_accepted <= draft_depth <= n_drafted (draft_depth -1 = not "
                  "recorded, then n_accepted <= n_drafted) and n_emitted, n_rollback_events >= 0");
  }
}

int64_t ResultsStore::FindCase(const std::string& case_key) const {
  sqlite3_stmt* s = Cached(&find_case_, "SELECT case_id FROM cases WHERE case_key = ?1");
  ResetOnExit reset(s);
  BindText(s, 1, case_key);
  const int rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) return ColInt(s, 0);
  if (rc != SQLITE_DONE) FailSqlite(rc, StrCat("looking up case '", case_key, "'"));
  return -1;
}

void ResultsStore::CheckRunExists(int64_t run_id, const std::string& what) const {
  sqlite3_stmt* s = Cached(&find_run_, "SELECT 1 FROM runs WHERE run_id = ?1");
  ResetOnExit reset(s);
  BindInt(s, 1, run_id);
  const int rc = sqlite3_step(s);
  if (rc == SQLITE_DONE) {
    Fail("results database '", path_, "': cannot write ", what, ": run_id ", run_id,
         " does not exist (call BeginRun first)");
  }
  if (rc != SQLITE_ROW) FailSqlite(rc, "looking up the run");
}

int64_t ResultsStore::InsertCase(int64_t run_id, const CaseRecord& c, size_t n_samples,
                                 size_t n_steps) {
  sqlite3_stmt* s = Cached(
      &insert_case_,
      "INSERT INTO cases(run_id, case_key, target, method, method_knobs_json, dataset, "
      "categories, prompt_limit, temperature, top_p, top_k, seed, max_new_tokens, batch_size, "
      "threads, dtype, device, config_json, wall_s, n_samples, n_steps, completed_at, "
      "method_traits_json, drafter, timing_mode) VALUES "
      "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, "
      "?20, ?21, ?22, ?23, ?24, ?25)");
  ResetOnExit reset(s);
  const std::string completed = NowRfc3339();
  BindAll(s, 1, run_id, c.case_key, c.target, c.method, c.method_knobs_json, c.dataset,
          c.categories, c.prompt_limit, c.temperature, c.top_p, c.top_k, SeedToInt(c.seed),
          c.max_new_tokens, c.batch_size, c.threads, c.dtype, c.device, c.config_json, c.wall_s,
          n_samples, n_steps, completed, c.method_traits_json, c.drafter, c.timing_mode);
  const int rc = sqlite3_step(s);
  if (rc != SQLITE_DONE) FailSqlite(rc, StrCat("writing case '", c.case_key, "'"));
  return sqlite3_last_insert_rowid(db_);
}

std::map<std::pair<std::string, int32_t>, int64_t> ResultsStore::InsertSamples(
    int64_t case_id, const CaseRecord& c, const std::vector<SampleRecord>& samples) {
  sqlite3_stmt* s = Cached(
      &insert_sample_,
      "INSERT INTO samples(case_id, prompt_id, turn, category, n_prompt_tokens, n_output_tokens, "
      "prefill_ms, decode_ms, n_steps, stop_reason, output_hash, output_text, output_ids_json, "
      "token_margins_json, paired_ar_decode_ms, paired_ar_output_tokens, paired_ar_first, "
      "paired_ar_prefill_ms) VALUES "
      "(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18)");
  std::map<std::pair<std::string, int32_t>, int64_t> sample_ids;
  for (const SampleRecord& sample : samples) {
    ResetOnExit reset(s);
    BindAll(s, 1, case_id, sample.prompt_id, sample.turn, sample.category, sample.n_prompt_tokens,
            sample.n_output_tokens, sample.prefill_ms, sample.decode_ms, sample.n_steps,
            sample.stop_reason, sample.output_hash, sample.output_text, sample.output_ids_json,
            sample.token_margins_json);
    if (sample.has_paired_ar()) {
      BindAll(s, 15, sample.paired_ar_decode_ms, sample.paired_ar_output_tokens,
              sample.paired_ar_first);
      if (std::isfinite(sample.paired_ar_prefill_ms)) BindReal(s, 18, sample.paired_ar_prefill_ms);
    }  // else NULL (bindings are cleared)
    const int rc = sqlite3_step(s);
    if ((rc & 0xff) == SQLITE_CONSTRAINT) {
      Fail("results database '", path_, "': case '", c.case_key, "' has two samples for prompt '",
           sample.prompt_id, "' turn ", sample.turn);
    }
    if (rc != SQLITE_DONE) {
      FailSqlite(rc, StrCat("writing sample '", sample.prompt_id, "' turn ", sample.turn,
                            " of case '", c.case_key, "'"));
    }
    sample_ids[{sample.prompt_id, sample.turn}] = sqlite3_last_insert_rowid(db_);
  }
  return sample_ids;
}

void ResultsStore::InsertSteps(
    int64_t case_id, const CaseRecord& c, const std::vector<StepRecord>& steps,
    const std::map<std::pair<std::string, int32_t>, int64_t>& sample_ids) {
  sqlite3_stmt* s =
      Cached(&insert_step_,
             "INSERT INTO steps(case_id, sample_id, step_idx, n_drafted, n_accepted, n_emitted, "
             "t_draft_us, t_verify_us, t_other_us, draft_depth, n_rollback_events, t_adapt_us, "
             "t_draft_busy_us, t_verify_busy_us, n_target_forwards, n_rolled_back, "
             "n_draft_generated, n_trimmed, t_draft_prefill_us) "
             "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, "
             "?18, ?19)");
  // Steps usually come grouped by sample: remember the last lookup.
  const std::pair<std::string, int32_t>* last_key = nullptr;
  int64_t sample_id = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const StepRecord& step = steps[i];
    if (last_key == nullptr || last_key->second != step.turn || last_key->first != step.prompt_id) {
      auto it = sample_ids.find({step.prompt_id, step.turn});
      if (it == sample_ids.end()) {
        Fail("results database '", path_, "': case '", c.case_key, "', step ", i, " (step_idx ",
             step.step_idx, ") names prompt '", step.prompt_id, "' turn ", step.turn,
             ", which has no sample in the case");
      }
      last_key = &it->first;
      sample_id = it->second;
    }
    ResetOnExit reset(s);
    BindAll(s, 1, case_id, sample_id, step.step_idx, step.n_drafted, step.n_accepted,
            step.n_emitted, step.t_draft_us, step.t_verify_us, step.t_other_us, step.draft_depth,
            step.n_rollback_events, step.t_adapt_us, step.t_draft_busy_us, step.t_verify_busy_us,
            step.n_target_forwards, step.n_rolled_back, step.n_draft_generated, step.n_trimmed,
            step.t_draft_prefill_us);
    const int rc = sqlite3_step(s);
    if ((rc & 0xff) == SQLITE_CONSTRAINT) {
      Fail("results database '", path_, "': case '", c.case_key, "' has two steps with step_idx ",
           step.step_idx, " for prompt '", step.prompt_id, "' turn ", step.turn);
    }
    if (rc != SQLITE_DONE) {
      FailSqlite(rc, StrCat("writing step ", step.step_idx, " of prompt '", step.prompt_id,
                            "' in case '", c.case_key, "'"));
    }
  }
}

void ResultsStore::WriteRowsOfRun(int64_t run_id, const std::string& table,
                                  const std::function<void()>& write_rows) {
  CheckWritable();
  const std::string what = "writing " + table + " rows";
  InTransaction(what.c_str(), [&] {
    CheckRunExists(run_id, table + " rows");
    write_rows();
  });
}

void ResultsStore::WriteBench(int64_t run_id, const std::vector<BenchRecord>& rows) {
  sqlite3_stmt* s = Cached(
      &insert_bench_,
      "INSERT INTO bench(run_id, model, dtype, threads, batch_size, context_len, n_tokens, reps, "
      "tokens_per_s, tokens_per_s_std, ms_per_step, forward_ms_per_step, other_ms_per_step, "
      "n_params, weight_bytes, bandwidth_gb_s, roofline_fraction, blas_core, gemv_kernel, "
      "huge_page_bytes) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, "
      "?16, ?17, ?18, ?19, ?20)");
  WriteRowsOfRun(run_id, "bench", [&] {
    for (const BenchRecord& r : rows) {
      ResetOnExit reset(s);
      BindAll(s, 1, run_id, r.model, r.dtype, r.threads, r.batch_size, r.context_len, r.n_tokens,
              r.reps, r.tokens_per_s, r.tokens_per_s_std, r.ms_per_step, r.forward_ms_per_step,
              r.other_ms_per_step, r.n_params, r.weight_bytes, r.bandwidth_gb_s,
              r.roofline_fraction, r.blas_core, r.gemv_kernel, r.huge_page_bytes);
      const int rc = sqlite3_step(s);
      if (rc != SQLITE_DONE) FailSqlite(rc, StrCat("writing the bench row for '", r.model, "'"));
    }
  });
}

void ResultsStore::WriteBenchVerify(int64_t run_id, const std::vector<BenchVerifyRecord>& rows) {
  OwnedStmt s(Prepare(
      "INSERT INTO bench_verify(run_id, model, dtype, threads, batch_size, context_len, n_query, "
      "reps, forward_ms, ratio_to_one, gemv_max_rows, blas_core, gemv_kernel) VALUES (?1, ?2, ?3, "
      "?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)"));
  WriteRowsOfRun(run_id, "bench_verify", [&] {
    for (const BenchVerifyRecord& r : rows) {
      ResetOnExit reset(s.get());
      BindAll(s.get(), 1, run_id, r.model, r.dtype, r.threads, r.batch_size, r.context_len,
              r.n_query, r.reps, r.forward_ms, r.ratio_to_one, r.gemv_max_rows, r.blas_core,
              r.gemv_kernel);
      const int rc = sqlite3_step(s.get());
      if (rc != SQLITE_DONE)
        FailSqlite(rc, StrCat("writing a bench_verify row for '", r.model, "'"));
    }
  });
}

void ResultsStore::WriteBenchBandwidth(int64_t run_id,
                                       const std::vector<BenchBandwidthRecord>& rows) {
  OwnedStmt s(Prepare(
      "INSERT INTO bench_bandwidth(run_id, threads, array_bytes, reps, copy_gb_s, triad_gb_s) "
      "VALUES (?1, ?2, ?3, ?4, ?5, ?6)"));
  WriteRowsOfRun(run_id, "bench_bandwidth", [&] {
    for (const BenchBandwidthRecord& r : rows) {
      ResetOnExit reset(s.get());
      BindAll(s.get(), 1, run_id, r.threads, r.array_bytes, r.reps, r.copy_gb_s, r.triad_gb_s);
      const int rc = sqlite3_step(s.get());
      if (rc != SQLITE_DONE) FailSqlite(rc, "writing a bench_bandwidth row");
    }
  });
}

std::vector<ResultsStore::CaseRow> ResultsStore::ListCases() const {
  op_start_us_ = NowMicros();
  // Files of schema v1 (opened read-only) lack the v2 columns: read their defaults.
  const char* v2_columns = schema_version_ >= 2 ? "method_traits_json, drafter" : "'', ''";
  const char* v4_columns = schema_version_ >= 4 ? ", timing_mode" : ", ''";
  OwnedStmt s(Prepare(
      StrCat("SELECT case_id, run_id, case_key, target, method, method_knobs_json, dataset, "
             "categories, prompt_limit, temperature, top_p, top_k, seed, max_new_tokens, "
             "batch_size, threads, dtype, device, config_json, wall_s, n_samples, ",
             v2_columns, v4_columns,
             ", (SELECT host || ' / ' || cpu || ' / ' || gpu FROM runs r "
             "WHERE r.run_id = cases.run_id) FROM cases ORDER BY case_id")
          .c_str()));
  std::vector<CaseRow> out;
  ForEachRow(s.get(), "listing cases", [&](sqlite3_stmt* q) {
    CaseRow row{};
    CaseRecord& c = row.record;
    int64_t seed = 0;
    ReadAll(q, 0, row.case_id, row.run_id, c.case_key, c.target, c.method, c.method_knobs_json,
            c.dataset, c.categories, c.prompt_limit, c.temperature, c.top_p, c.top_k, seed,
            c.max_new_tokens, c.batch_size, c.threads, c.dtype, c.device, c.config_json, c.wall_s,
            row.n_samples, c.method_traits_json, c.drafter, c.timing_mode, row.machine);
    c.seed = IntToSeed(seed);
    out.push_back(std::move(row));
  });
  return out;
}

std::vector<SampleRecord> ResultsStore::LoadSamples(int64_t case_id) const {
  op_start_us_ = NowMicros();
  const char* v2_columns = schema_version_ >= 2 ? "token_margins_json" : "''";
  const char* v4_columns = schema_version_ >= 4
                               ? ", paired_ar_decode_ms, paired_ar_output_tokens, paired_ar_first"
                               : ", NULL, NULL, NULL";
  const char* v6_columns = schema_version_ >= 6 ? ", paired_ar_prefill_ms" : ", NULL";
  OwnedStmt s(Prepare(StrCat("SELECT prompt_id, turn, category, n_prompt_tokens, n_output_tokens, "
                             "prefill_ms, decode_ms, n_steps, stop_reason, output_hash, "
                             "output_text, output_ids_json, ",
                             v2_columns, v4_columns, v6_columns,
                             " FROM samples WHERE case_id = ?1 ORDER BY sample_id")
                          .c_str()));
  BindInt(s.get(), 1, case_id);
  std::vector<SampleRecord> out;
  ForEachRow(s.get(), StrCat("loading the samples of case ", case_id), [&](sqlite3_stmt* q) {
    SampleRecord r;
    ReadAll(q, 0, r.prompt_id, r.turn, r.category, r.n_prompt_tokens, r.n_output_tokens,
            r.prefill_ms, r.decode_ms, r.n_steps, r.stop_reason, r.output_hash, r.output_text,
            r.output_ids_json, r.token_margins_json);
    if (sqlite3_column_type(q, 14) != SQLITE_NULL) {
      ReadAll(q, 13, r.paired_ar_decode_ms, r.paired_ar_output_tokens, r.paired_ar_first);
      if (sqlite3_column_type(q, 16) != SQLITE_NULL) r.paired_ar_prefill_ms = ColReal(q, 16);
    }
    out.push_back(std::move(r));
  });
  return out;
}

std::vector<StepRecord> ResultsStore::LoadSteps(int64_t case_id) const {
  op_start_us_ = NowMicros();
  const char* v2_columns = schema_version_ >= 2 ? "st.draft_depth, st.n_rollback_events" : "-1, 0";
  const char* v3_columns = schema_version_ >= 3 ? ", st.t_adapt_us" : ", 0";
  const char* v6_columns = schema_version_ >= 6
                               ? ", st.t_draft_busy_us, st.t_verify_busy_us, st.n_target_forwards, "
                                 "st.n_rolled_back, st.n_draft_generated"
                               : ", -1, -1, -1, -1, -1";
  const char* v10_columns =
      schema_version_ >= 10 ? ", st.n_trimmed, st.t_draft_prefill_us" : ", -1, -1";
  OwnedStmt s(Prepare(StrCat("SELECT s.prompt_id, s.turn, st.step_idx, st.n_drafted, "
                             "st.n_accepted, st.n_emitted, st.t_draft_us, st.t_verify_us, "
                             "st.t_other_us, ",
                             v2_columns, v3_columns, v6_columns, v10_columns,
                             " FROM steps st JOIN samples s ON s.sample_id = st.sample_id WHERE "
                             "st.case_id = ?1 ORDER BY st.step_id")
                          .c_str()));
  BindInt(s.get(), 1, case_id);
  std::vector<StepRecord> out;
  ForEachRow(s.get(), StrCat("loading the steps of case ", case_id), [&](sqlite3_stmt* q) {
    StepRecord r;
    ReadAll(q, 0, r.prompt_id, r.turn, r.step_idx, r.n_drafted, r.n_accepted, r.n_emitted,
            r.t_draft_us, r.t_verify_us, r.t_other_us, r.draft_depth, r.n_rollback_events,
            r.t_adapt_us, r.t_draft_busy_us, r.t_verify_busy_us, r.n_target_forwards,
            r.n_rolled_back, r.n_draft_generated, r.n_trimmed, r.t_draft_prefill_us);
    out.push_back(std::move(r));
  });
  return out;
}

std::vector<BenchRecord> ResultsStore::LoadBench(int64_t run_id) const {
  op_start_us_ = NowMicros();
  const char* v5_columns = schema_version_ >= 5
                               ? "weight_bytes, bandwidth_gb_s, roofline_fraction, blas_core"
                               : "-1, NULL, NULL, ''";
  const char* v11_columns = schema_version_ >= 11 ? ", gemv_kernel, huge_page_bytes" : ", '', -1";
  OwnedStmt s(Prepare(
      StrCat("SELECT model, dtype, threads, batch_size, context_len, n_tokens, reps, tokens_per_s, "
             "tokens_per_s_std, ms_per_step, forward_ms_per_step, other_ms_per_step, n_params, ",
             v5_columns, v11_columns, " FROM bench WHERE ?1 < 0 OR run_id = ?1 ORDER BY bench_id")
          .c_str()));
  BindInt(s.get(), 1, run_id);
  std::vector<BenchRecord> out;
  ForEachRow(s.get(), "loading bench rows", [&](sqlite3_stmt* q) {
    BenchRecord r;
    ReadAll(q, 0, r.model, r.dtype, r.threads, r.batch_size, r.context_len, r.n_tokens, r.reps,
            r.tokens_per_s, r.tokens_per_s_std, r.ms_per_step, r.forward_ms_per_step,
            r.other_ms_per_step, r.n_params, r.weight_bytes, r.bandwidth_gb_s, r.roofline_fraction,
            r.blas_core, r.gemv_kernel, r.huge_page_bytes);
    out.push_back(std::move(r));
  });
  return out;
}

std::vector<BenchVerifyRecord> ResultsStore::LoadBenchVerify(int64_t run_id) const {
  std::vector<BenchVerifyRecord> out;
  if (schema_version_ < 5) return out;
  op_start_us_ = NowMicros();
  OwnedStmt s(Prepare(StrCat("SELECT model, dtype, threads, batch_size, context_len, n_query, "
                             "reps, forward_ms, ratio_to_one, gemv_max_rows, blas_core, ",
                             schema_version_ >= 11 ? "gemv_kernel" : "''",
                             " FROM bench_verify WHERE ?1 < 0 OR run_id = ?1 "
                             "ORDER BY bench_verify_id")
                          .c_str()));
  BindInt(s.get(), 1, run_id);
  ForEachRow(s.get(), "loading bench_verify rows", [&](sqlite3_stmt* q) {
    BenchVerifyRecord r;
    ReadAll(q, 0, r.model, r.dtype, r.threads, r.batch_size, r.context_len, r.n_query, r.reps,
            r.forward_ms, r.ratio_to_one, r.gemv_max_rows, r.blas_core, r.gemv_kernel);
    out.push_back(std::move(r));
  });
  return out;
}

std::vector<BenchBandwidthRecord> ResultsStore::LoadBenchBandwidth(int64_t run_id) const {
  std::vector<BenchBandwidthRecord> out;
  if (schema_version_ < 5) return out;
  op_start_us_ = NowMicros();
  OwnedStmt s(
      Prepare("SELECT threads, array_bytes, reps, copy_gb_s, triad_gb_s FROM bench_bandwidth "
              "WHERE ?1 < 0 OR run_id = ?1 ORDER BY bandwidth_id"));
  BindInt(s.get(), 1, run_id);
  ForEachRow(s.get(), "loading bench_bandwidth rows", [&](sqlite3_stmt* q) {
    BenchBandwidthRecord r;
    ReadAll(q, 0, r.threads, r.array_bytes, r.reps, r.copy_gb_s, r.triad_gb_s);
    out.push_back(std::move(r));
  });
  return out;
}

int64_t ResultsStore::CountRows(const std::string& table) const {
  if (!Contains(kTables, table)) FailUnknownName("results table", table, kTables);
  op_start_us_ = NowMicros();
  OwnedStmt s(Prepare(StrCat("SELECT count(*) FROM ", table).c_str()));
  const int rc = sqlite3_step(s.get());
  if (rc != SQLITE_ROW) FailSqlite(rc, StrCat("counting rows of ", table));
  return ColInt(s.get(), 0);
}

std::vector<ResultsStore::RunRow> ResultsStore::ListRuns() const {
  op_start_us_ = NowMicros();
  OwnedStmt s(Prepare(
      "SELECT run_id, started_at, specbed_version, git_commit, build_flags, host, cpu, gpu, "
      "library_versions_json, config_json, repro_command FROM runs ORDER BY run_id"));
  std::vector<RunRow> out;
  ForEachRow(s.get(), "listing runs", [&](sqlite3_stmt* q) {
    RunRow r;
    RunInfo& i = r.info;
    ReadAll(q, 0, r.run_id, i.started_at, i.specbed_version, i.git_commit, i.build_flags, i.host,
            i.cpu, i.gpu, i.library_versions_json, i.config_json, i.repro_command);
    out.push_back(std::move(r));
  });
  return out;
}

std::vector<int64_t> ResultsStore::ListRunIds() const {
  op_start_us_ = NowMicros();
  OwnedStmt s(Prepare("SELECT run_id FROM runs ORDER BY run_id"));
  std::vector<int64_t> out;
  ForEachRow(s.get(), "listing runs", [&](sqlite3_stmt* q) { out.push_back(ColInt(q, 0)); });
  return out;
}

// ---------------------------------------------------------------------------------------------
// Drafter training logs (schema v3).

namespace {

void StepOnce(sqlite3_stmt* s, const std::function<void(int)>& on_error) {
  const int rc = sqlite3_step(s);
  if (rc != SQLITE_DONE && rc != SQLITE_ROW) on_error(rc);
}

}  // namespace

int64_t ResultsStore::BeginTrainRun(const TrainRunRecord& run) {
  CheckWritable();
  SPECBED_CHECK(schema_version_ >= 3, "results database '", path_, "' has schema version ",
                schema_version_, "; training logs need version 3 (open it read-write to migrate)");
  SPECBED_CHECK(!run.train_key.empty() && !run.task.empty(), "results database '", path_,
                "': a training run needs a train_key and a task");
  int64_t id = -1;
  InTransaction("starting a training run", [&] {
    {
      OwnedStmt s(Prepare("SELECT train_id FROM train_runs WHERE train_key = ?1"));
      BindText(s.get(), 1, run.train_key);
      ForEachRow(s.get(), "looking up a training run", [&](sqlite3_stmt* q) { id = ColInt(q, 0); });
    }
    if (id >= 0) return;
    OwnedStmt s(
        Prepare("INSERT INTO train_runs(train_key, task, out_dir, settings_json, started_at, "
                "finished_at, summary_json) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"));
    // Bound without a copy: the strings must live until the step.
    const std::string started = run.started_at.empty() ? NowRfc3339() : run.started_at;
    BindAll(s.get(), 1, run.train_key, run.task, run.out_dir, run.settings_json, started,
            run.finished_at, run.summary_json);
    StepOnce(s.get(), [&](int rc) { FailSqlite(rc, "inserting a training run"); });
    id = sqlite3_last_insert_rowid(db_);
  });
  return id;
}

void ResultsStore::TruncateTrainRun(int64_t train_id, int64_t last_step) {
  CheckWritable();
  InTransaction("truncating a training log", [&] {
    for (const char* sql : {"DELETE FROM train_log WHERE train_id = ?1 AND step > ?2",
                            "DELETE FROM train_eval WHERE train_id = ?1 AND step > ?2",
                            "UPDATE train_runs SET finished_at = '', summary_json = '' WHERE "
                            "train_id = ?1 AND ?2 = ?2"}) {
      OwnedStmt s(Prepare(sql));
      BindAll(s.get(), 1, train_id, last_step);
      StepOnce(s.get(), [&](int rc) { FailSqlite(rc, "truncating a training log"); });
    }
  });
}

void ResultsStore::AppendTrainLog(int64_t train_id, const std::vector<TrainLogRow>& log,
                                  const std::vector<TrainEvalRow>& evals) {
  CheckWritable();
  if (log.empty() && evals.empty()) return;
  InTransaction("writing a training log", [&] {
    OwnedStmt s(
        Prepare("INSERT INTO train_log(train_id, step, loss, lr, grad_norm, elapsed_s) "
                "VALUES (?1, ?2, ?3, ?4, ?5, ?6)"));
    for (const TrainLogRow& r : log) {
      ResetOnExit reset(s.get());
      BindAll(s.get(), 1, train_id, r.step, r.loss, r.lr, r.grad_norm, r.elapsed_s);
      StepOnce(s.get(), [&](int rc) {
        if ((rc & 0xff) == SQLITE_CONSTRAINT) {
          Fail("results database '", path_, "': training run ", train_id,
               " already has a log row for step ", r.step, " (or the run does not exist)");
        }
        FailSqlite(rc, "writing a training log row");
      });
    }
    OwnedStmt e(
        Prepare("INSERT OR REPLACE INTO train_eval(train_id, step, val_loss, "
                "acceptance_proxy, metrics_json) VALUES (?1, ?2, ?3, ?4, ?5)"));
    for (const TrainEvalRow& r : evals) {
      ResetOnExit reset(e.get());
      BindAll(e.get(), 1, train_id, r.step, r.val_loss, r.acceptance_proxy, r.metrics_json);
      StepOnce(e.get(), [&](int rc) { FailSqlite(rc, "writing a training evaluation"); });
    }
  });
}

void ResultsStore::FinishTrainRun(int64_t train_id, const std::string& summary_json) {
  CheckWritable();
  InTransaction("finishing a training run", [&] {
    OwnedStmt s(
        Prepare("UPDATE train_runs SET finished_at = ?2, summary_json = ?3 WHERE train_id = ?1"));
    const std::string now = NowRfc3339();
    BindAll(s.get(), 1, train_id, now, summary_json);
    StepOnce(s.get(), [&](int rc) { FailSqlite(rc, "finishing a training run"); });
  });
}

std::vector<ResultsStore::TrainRunRow> ResultsStore::ListTrainRuns() const {
  op_start_us_ = NowMicros();
  std::vector<TrainRunRow> out;
  if (schema_version_ < 3) return out;
  OwnedStmt s(
      Prepare("SELECT train_id, train_key, task, out_dir, settings_json, started_at, "
              "finished_at, summary_json FROM train_runs ORDER BY train_id"));
  ForEachRow(s.get(), "listing training runs", [&](sqlite3_stmt* q) {
    TrainRunRow r;
    TrainRunRecord& t = r.record;
    ReadAll(q, 0, r.train_id, t.train_key, t.task, t.out_dir, t.settings_json, t.started_at,
            t.finished_at, t.summary_json);
    out.push_back(std::move(r));
  });
  return out;
}

std::vector<TrainLogRow> ResultsStore::LoadTrainLog(int64_t train_id) const {
  op_start_us_ = NowMicros();
  std::vector<TrainLogRow> out;
  if (schema_version_ < 3) return out;
  OwnedStmt s(
      Prepare("SELECT step, loss, lr, grad_norm, elapsed_s FROM train_log WHERE "
              "train_id = ?1 ORDER BY step"));
  BindInt(s.get(), 1, train_id);
  ForEachRow(s.get(), "loading a training log", [&](sqlite3_stmt* q) {
    TrainLogRow r;
    ReadAll(q, 0, r.step, r.loss, r.lr, r.grad_norm, r.elapsed_s);
    out.push_back(r);
  });
  return out;
}

std::vector<TrainEvalRow> ResultsStore::LoadTrainEval(int64_t train_id) const {
  op_start_us_ = NowMicros();
  std::vector<TrainEvalRow> out;
  if (schema_version_ < 3) return out;
  OwnedStmt s(
      Prepare("SELECT step, val_loss, acceptance_proxy, metrics_json FROM train_eval "
              "WHERE train_id = ?1 ORDER BY step"));
  BindInt(s.get(), 1, train_id);
  ForEachRow(s.get(), "loading training evaluations", [&](sqlite3_stmt* q) {
    TrainEvalRow r;
    ReadAll(q, 0, r.step, r.val_loss, r.acceptance_proxy, r.metrics_json);
    out.push_back(std::move(r));
  });
  return out;
}

}  // namespace specbed
