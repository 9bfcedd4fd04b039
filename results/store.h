// The SpecBed results store: one SQLite database (WAL mode, versioned schema, append-only) holding
// runs, completed cases with their per-prompt samples and per-verify-step records, and `specbed
// bench` rows. Every metric (speed, tau, acceptance) is computed later from these raw facts.
// A case is written with all its samples and steps in one transaction, so a crash never leaves a
// partial case, and a sweep resumes by skipping case keys that are already stored.
// Schema, units and example queries: results/README.md.
// Checked by: tests/results/store_test.cpp (round trips, resume, crash and lock behaviour, errors).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/step_counters.h"
#include "results/serve_records.h"

struct sqlite3;
struct sqlite3_stmt;

namespace specbed {

template <typename Record>
struct Field;  // results/record_schema.h

// Version 2 added samples.token_margins_json, steps.draft_depth / n_rollback_events and
// cases.method_traits_json / drafter (see results/README.md, "Schema history").
// Version 3 added steps.t_adapt_us and the drafter-training tables train_runs / train_log /
// train_eval.
// Version 4 added paired timing: cases.timing_mode and samples.paired_ar_decode_ms /
// paired_ar_output_tokens / paired_ar_first.
// Version 5 added bench.weight_bytes / bandwidth_gb_s / roofline_fraction / blas_core and the
// `specbed bench` tables bench_verify (verify-width curve) and bench_bandwidth (STREAM).
// Version 6 added the parallel-decoder step columns and samples.paired_ar_prefill_ms.
// Version 7 added the views case_baseline, answer_speedup and case_summary (summary's point
// estimates in SQL; no table changes). Version 8 limited case_baseline to the same machine.
// Version 9 added vLLM's metric names: case_summary.acceptance_rate / mean_acceptance_length and
// the view position_acceptance (no table changes). Version 10 added steps.n_trimmed and
// t_draft_prefill_us. Version 11 added bench.gemv_kernel / huge_page_bytes and
// bench_verify.gemv_kernel (the CPU kernels a bench row ran). Version 12 added the steps' device
// time per phase and engine counters (launches, host reads, graph replays / captures, copies each
// way; base/step_counters.h). Version 13 added bench.test (tg = decode, pp = prompt processing).
// Version 14 added the `specbed serve` tables serve_cells, serve_requests and serve_steps
// (results/serve_records.h; generated from the field tables, CREATE TABLE on migration).
inline constexpr int kResultsSchemaVersion = 14;

// One invocation of `specbed run/sweep/bench`.
struct RunInfo {
  std::string started_at;                                // RFC 3339 UTC
  std::string specbed_version, git_commit, build_flags;  // build identity
  std::string host, cpu, gpu;                            // hardware ("" gpu = none)
  std::string library_versions_json;                     // {"torch":"2.11.0","sqlite":"3.40.1",...}
  std::string config_json;                               // full resolved config of the run
  std::string repro_command;                             // command line that reproduces the run
};

// One completed case: one target x method (with knobs) x dataset selection x sampling settings.
struct CaseRecord {
  std::string case_key;  // hash of the resolved case config; unique among completed cases
  std::string target, method, method_knobs_json, dataset;
  std::string categories;  // comma-joined category filter ("" = all)
  int64_t prompt_limit = -1;
  double temperature = 0, top_p = 1;
  int64_t top_k = 0;
  uint64_t seed = 0;  // stored bit-cast into a signed 64-bit INTEGER (see README)
  int64_t max_new_tokens = 0, batch_size = 1, threads = 1;
  std::string dtype;        // "float32" | "bfloat16"
  std::string device;       // "cpu" | "cuda"
  std::string config_json;  // full resolved case config
  double wall_s = 0;        // wall time of the whole case, seconds
  // Schema v2 (rows migrated from v1 read back as ""):
  std::string method_traits_json;  // the method's MethodTraits as JSON, filled by the runner
  std::string drafter;             // draft model name, "" when the method has none
  // Schema v4: how the case was timed: "paired" (AR timed on the same prompt right before or
  // after each answer, samples carry paired_ar_*) or "per_case"; "" = not recorded (before v4).
  std::string timing_mode;
};

// One generated answer: one prompt (one turn of a multi-turn prompt) of a case.
struct SampleRecord {
  std::string prompt_id;
  int32_t turn = 0;
  std::string category;
  int64_t n_prompt_tokens = 0, n_output_tokens = 0;
  double prefill_ms = 0, decode_ms = 0;
  int64_t n_steps = 0;      // verify steps as reported by the runner
  std::string stop_reason;  // "eos" | "max_new_tokens" | "stop_string" | "max_context"
  std::string output_hash;  // hash of generated token ids
  std::string output_text;
  std::string output_ids_json;  // "[12,7,...]"
  // Schema v2: "[m0,m1,...]", the target's top-2 logit gap (largest minus second-largest logit)
  // of the distribution each generated token i was chosen from; written by AR cases for the
  // losslessness diagnostics, "" otherwise (and for rows migrated from v1).
  std::string token_margins_json;
  // Schema v4, paired timing only (NULL in SQL otherwise): the AR generation of the same prompt
  // ids, seed and thread count timed back to back with this answer: its decode time, its output
  // length, and whether it ran first (1) or second (0).
  double paired_ar_decode_ms = std::numeric_limits<double>::quiet_NaN();
  int64_t paired_ar_output_tokens = -1;  // -1 = no paired AR run
  int32_t paired_ar_first = -1;          // -1 = no paired AR run
  // Schema v6: the paired AR run's prefill time (NaN for samples written before v6), for the
  // end-to-end speedup (prefill + decode).
  double paired_ar_prefill_ms = std::numeric_limits<double>::quiet_NaN();
  bool has_paired_ar() const { return paired_ar_output_tokens >= 0; }
};

// One verify step of a speculative method (none for autoregressive decoding): the decoder's
// counters and phase times (base/step_counters.h, each documented there and in
// results/README.md) with the answer it belongs to. (prompt_id, turn) must name a sample of the
// same case. n_drafted = drafted nodes offered to the verifier (the root excluded); n_accepted =
// draft tokens kept (<= draft_depth); n_emitted = tokens appended (accepted + bonus/correction,
// cut by stop conditions). A new StepRecord starts every field whose rule is "not recorded = -1"
// (record_schema.h: draft_depth, the busy times, n_target_forwards, n_rolled_back,
// n_draft_generated, n_trimmed, t_draft_prefill_us) at -1: what a row written before that field
// reads back as (metrics then leave it out, or assume a chain for draft_depth).
struct StepRecord : StepCounters {
  StepRecord();
  std::string prompt_id;
  int32_t turn = 0;
  int64_t step_idx = 0;
};

// One row of `specbed bench` (autoregressive decode speed).
struct BenchRecord {
  std::string model, dtype;
  int64_t threads = 1, batch_size = 1, context_len = 0, n_tokens = 0, reps = 1;
  double tokens_per_s = 0, tokens_per_s_std = 0, ms_per_step = 0, forward_ms_per_step = 0,
         other_ms_per_step = 0;
  int64_t n_params = 0;
  // Schema v5 (rows from older files read back as -1 / NaN / ""):
  int64_t weight_bytes = -1;  // bytes of every layer matrix + lm_head in the model dtype
  double bandwidth_gb_s = std::numeric_limits<double>::quiet_NaN();  // triad, same threads
  // (weight_bytes / bandwidth) / forward time per step: AR decode's fraction of the memory
  // roofline (batch 1; for batch > 1 the same bytes serve `batch` tokens per step).
  double roofline_fraction = std::numeric_limits<double>::quiet_NaN();
  std::string blas_core;  // OpenBLAS core type in use, e.g. "Haswell (OPENBLAS_CORETYPE=Haswell)"
  // Schema v11 ('' / -1 before): the GEMV kernel of the row's dtype (models/gemv.h, e.g.
  // "avx512bf16"; "" off the CPU row kernels) and the bytes of its streamed weights that the
  // kernel backed with huge pages (models/weight_arena.h; 0 = none, -1 = not packed or unknown).
  std::string gemv_kernel;
  int64_t huge_page_bytes = -1;
  // Schema v13 ('' before = tg): "tg" = decode (n_tokens generated after context_len cached
  // tokens; llama-bench's tgN) or "pp" = prompt processing (one forward of n_tokens into an empty
  // cache per rep; ms_per_step = that forward; llama-bench's ppN).
  std::string test = "tg";
};

// Schema v5: one point of `specbed bench --verify-widths`: the forward time of `n_query` new
// tokens appended after `context_len` cached tokens (all logits returned, as a verifier does).
struct BenchVerifyRecord {
  std::string model, dtype;
  int64_t threads = 1, batch_size = 1, context_len = 0, n_query = 1, reps = 1;
  double forward_ms = 0;      // median over reps, milliseconds
  double ratio_to_one = 0;    // forward_ms / forward_ms at n_query = 1 (same model/dtype/threads)
  int64_t gemv_max_rows = 0;  // models/gemv.h threshold in effect (0 = ATen/BLAS only)
  std::string blas_core;
  std::string gemv_kernel;  // schema v11 ('' before): as BenchRecord::gemv_kernel
};

// Schema v5: the machine's memory bandwidth, STREAM-style (double arrays much larger than the
// last-level cache; best of `reps`). Bytes counted as STREAM does: copy 16 B, triad 24 B per
// element (no write-allocate traffic).
struct BenchBandwidthRecord {
  int64_t threads = 1;
  int64_t array_bytes = 0;  // bytes of each of the three arrays
  int64_t reps = 1;
  double copy_gb_s = 0, triad_gb_s = 0;  // 1 GB = 1e9 bytes
};

// Drafter training logs (schema v3): one train_runs row per training output directory, the loss
// curve (train_log) and the periodic held-out evaluations (train_eval).
struct TrainRunRecord {
  std::string train_key;      // identity of the run (hash of its settings + output directory)
  std::string task;           // "draft-lm", "eagle3", ...
  std::string out_dir;        // where the drafter is written
  std::string settings_json;  // the run identity (every setting that changes the weights)
  std::string started_at;     // RFC 3339 UTC
  std::string finished_at;    // "" while unfinished
  std::string summary_json;   // "" while unfinished
};
struct TrainLogRow {
  int64_t step = 0;  // 1-based optimiser step
  double loss = 0, lr = 0, grad_norm = 0;
  double elapsed_s = 0;  // training time up to this step, summed over resumed processes
};
struct TrainEvalRow {
  int64_t step = 0;  // step after which the evaluation ran (0 = before training)
  double val_loss = 0;
  double acceptance_proxy = 0;      // method-specific, e.g. expected acceptance or top-1 agreement
  std::string metrics_json = "{}";  // every evaluation figure
};

struct StoreOptions {
  int busy_timeout_ms = 10000;  // how long a write waits for another process's write lock
  bool read_only = false;       // open an existing database for reading only
};

// Not thread-safe: use one ResultsStore per thread (several processes may share one file).
// Every failure throws specbed::Error with a message naming the database path.
class ResultsStore {
 public:
  // Opens (creating it and its schema when missing, unless read_only) the database at `path`.
  // Fails for: an uncreatable path, a file that is not a SQLite database, a SQLite database that
  // is not a SpecBed results database, or one written by a newer schema version. Older schema
  // versions are migrated by read-write opens; read-only opens read them as they are (columns
  // added later read back as their defaults) and schema_version() reports the file's version.
  static std::unique_ptr<ResultsStore> Open(const std::string& path,
                                            const StoreOptions& options = {});
  ~ResultsStore();
  ResultsStore(const ResultsStore&) = delete;
  ResultsStore& operator=(const ResultsStore&) = delete;

  // Inserts a runs row, returns its run_id.
  int64_t BeginRun(const RunInfo& run);
  bool HasCompletedCase(const std::string& case_key) const;
  // Writes the case with all its samples and steps in ONE transaction. If a completed case with
  // the same key already exists, writes nothing and returns the existing case_id (never
  // duplicates). On any failure nothing of the case is stored.
  int64_t WriteCase(int64_t run_id, const CaseRecord& c, const std::vector<SampleRecord>& samples,
                    const std::vector<StepRecord>& steps);
  // Writes all rows in one transaction.
  void WriteBench(int64_t run_id, const std::vector<BenchRecord>& rows);
  // Schema v5 bench tables; each call is one transaction.
  void WriteBenchVerify(int64_t run_id, const std::vector<BenchVerifyRecord>& rows);
  void WriteBenchBandwidth(int64_t run_id, const std::vector<BenchBandwidthRecord>& rows);

  // Read side (used by `specbed summary`, reports and tests). Rows come in insertion order.
  struct CaseRow {
    int64_t case_id, run_id;
    CaseRecord record;
    int64_t n_samples;
    // The machine its run recorded: "host / cpu / gpu" of the runs row ("" when the run row is
    // missing). Baselines from another machine are used only when asked (metrics BaselinePolicy).
    std::string machine;
  };
  std::vector<CaseRow> ListCases() const;
  std::vector<SampleRecord> LoadSamples(int64_t case_id) const;
  std::vector<StepRecord> LoadSteps(int64_t case_id) const;
  std::vector<BenchRecord> LoadBench(int64_t run_id = -1) const;              // -1 = all runs
  std::vector<BenchVerifyRecord> LoadBenchVerify(int64_t run_id = -1) const;  // none before v5
  std::vector<BenchBandwidthRecord> LoadBenchBandwidth(int64_t run_id = -1) const;
  // Row count of one of: runs, cases, samples, steps, bench, bench_verify, bench_bandwidth, meta,
  // train_runs, train_log, train_eval, serve_cells, serve_requests, serve_steps.
  int64_t CountRows(const std::string& table) const;
  // Ids of all runs in order (convenience for reports and tests).
  std::vector<int64_t> ListRunIds() const;
  // Every run with its provenance, in order.
  struct RunRow {
    int64_t run_id = 0;
    RunInfo info;
  };
  std::vector<RunRow> ListRuns() const;
  // Drafter training logs. BeginTrainRun returns the train_id of `run.train_key`, inserting the
  // row when new (an existing row is kept: a resumed run continues it). TruncateTrainRun drops
  // the log/eval rows past `last_step` and marks the run unfinished (a resume from a checkpoint).
  // AppendTrainLog writes rows in one transaction (a step already stored is an error).
  int64_t BeginTrainRun(const TrainRunRecord& run);
  void TruncateTrainRun(int64_t train_id, int64_t last_step);
  void AppendTrainLog(int64_t train_id, const std::vector<TrainLogRow>& log,
                      const std::vector<TrainEvalRow>& evals = {});
  void FinishTrainRun(int64_t train_id, const std::string& summary_json);
  struct TrainRunRow {
    int64_t train_id = 0;
    TrainRunRecord record;
  };
  std::vector<TrainRunRow> ListTrainRuns() const;
  std::vector<TrainLogRow> LoadTrainLog(int64_t train_id) const;
  std::vector<TrainEvalRow> LoadTrainEval(int64_t train_id) const;

  // `specbed serve` (schema v14, results/serve_records.h). HasServeCell: whether a cell with the
  // key is stored (false on an older file opened read-only). AddServeCell writes the cell with all
  // its requests and steps in ONE transaction and returns its cell_id; a key already stored is an
  // error naming it (nothing written), and so is any invalid row (checked before the write lock).
  bool HasServeCell(const std::string& cell_key) const;
  int64_t AddServeCell(int64_t run_id, const ServeCellRecord& cell,
                       const std::vector<ServeRequestRecord>& requests,
                       const std::vector<ServeStepRecord>& steps);
  // Every stored cell in insertion order (none before v14), with its ids and its run's machine
  // ("host / cpu / gpu", as CaseRow::machine); its requests (by request_index) and steps (by
  // step_index).
  struct ServeCellRow {
    int64_t cell_id = 0, run_id = 0;
    ServeCellRecord record;
    std::string completed_at;  // RFC 3339 UTC time the cell was written
    std::string machine;
  };
  std::vector<ServeCellRow> ServeCells() const;
  std::vector<ServeRequestRecord> ServeRequests(int64_t cell_id) const;
  std::vector<ServeStepRecord> ServeSteps(int64_t cell_id) const;

  int schema_version() const { return schema_version_; }
  const std::string& path() const { return path_; }

 private:
  // Checks the store is writable and `run_id` exists, then runs `write_rows` in one transaction
  // (rolled back on any error); errors name the database and `table`.
  void WriteRowsOfRun(int64_t run_id, const std::string& table,
                      const std::function<void()>& write_rows);
  // The rows of a table keyed by run (bench*) or training run, through their field tables.
  template <typename R>
  void WriteRunRows(int64_t run_id, const char* table, const std::vector<Field<R>>& fields,
                    const std::vector<R>& rows);
  // The rows of `table` whose `key_column` is `key` (every row for a negative key), ordered by
  // `order_column`, through their field tables; none from a file older than `table_since`.
  // Instantiated in store.cpp for the bench and training-run tables.
  template <typename R>
  std::vector<R> LoadKeyedRows(const char* table, const char* key_column, const char* order_column,
                               const std::vector<Field<R>>& fields, int table_since,
                               int64_t key) const;
  // Runs `select` with ?1 bound to `key` as a read operation, calling `row` on each row; an SQLite
  // error fails naming "loading <what>".
  void QueryRows(const std::string& select, int64_t key, const std::string& what,
                 const std::function<void(sqlite3_stmt*)>& row) const;
  ResultsStore(const std::string& path, const StoreOptions& options);
  void Init();
  void InitSchema();
  void MigrateSchema(int from_version);
  void CheckWritable() const;
  // Runs `body` in one write transaction named `op` (rolled back when it throws).
  void InTransaction(const char* op, const std::function<void()>& body);
  // Steps `s` over its rows, calling `row` on each; an SQLite error fails naming `what`.
  void ForEachRow(sqlite3_stmt* s, const std::string& what,
                  const std::function<void(sqlite3_stmt*)>& row) const;
  // WriteCase's steps: the checks before the write lock, the case already stored (its case_id,
  // -1 if none), the run that must exist (errors say "cannot write <what>"), then the rows.
  void ValidateCase(const CaseRecord& c, const std::vector<SampleRecord>& samples,
                    const std::vector<StepRecord>& steps) const;
  int64_t FindCase(const std::string& case_key) const;
  // AddServeCell's checks (before the write lock) and its cell_id lookup (-1 if none).
  void ValidateServeCell(const ServeCellRecord& cell,
                         const std::vector<ServeRequestRecord>& requests,
                         const std::vector<ServeStepRecord>& steps) const;
  int64_t FindServeCell(const std::string& cell_key) const;
  void CheckRunExists(int64_t run_id, const std::string& what) const;
  int64_t InsertCase(int64_t run_id, const CaseRecord& c, size_t n_samples, size_t n_steps);
  std::map<std::pair<std::string, int32_t>, int64_t> InsertSamples(
      int64_t case_id, const CaseRecord& c, const std::vector<SampleRecord>& samples);
  void InsertSteps(int64_t case_id, const CaseRecord& c, const std::vector<StepRecord>& steps,
                   const std::map<std::pair<std::string, int32_t>, int64_t>& sample_ids);
  void Begin(const char* op);
  void Commit(const char* op);
  void RollbackQuietly() noexcept;
  sqlite3_stmt* Prepare(const char* sql) const;
  sqlite3_stmt* Cached(sqlite3_stmt** slot, const char* sql) const;
  [[noreturn]] void FailSqlite(int rc, const std::string& op) const;
  void Exec(const char* sql, const std::string& op) const;

  std::string path_;
  StoreOptions options_;
  sqlite3* db_ = nullptr;
  int schema_version_ = 0;
  mutable int64_t op_start_us_ = 0;  // start of the current public operation, for lock messages
  // Prepared statements, created on first use and reused (finalized by the destructor).
  mutable sqlite3_stmt* insert_run_ = nullptr;
  mutable sqlite3_stmt* insert_case_ = nullptr;
  mutable sqlite3_stmt* insert_sample_ = nullptr;
  mutable sqlite3_stmt* insert_step_ = nullptr;
  mutable sqlite3_stmt* find_case_ = nullptr;
  mutable sqlite3_stmt* find_run_ = nullptr;
};

// Creates a database at `path` laid out exactly as schema `version` (1..kResultsSchemaVersion) laid
// it out: the first schema and the migrations up to `version`, its meta rows and user_version, no
// results. For the tests that open every earlier version (tests/results/record_schema_test.cpp).
void CreateResultsDatabaseAtVersion(const std::string& path, int version);

// Version of the linked SQLite library ("3.40.1"), for RunInfo::library_versions_json.
std::string SqliteLibraryVersion();

}  // namespace specbed
