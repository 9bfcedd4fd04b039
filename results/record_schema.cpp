// The field tables of record_schema.h. A table's order is the order of its fields in the exports
// and the summary (the SQL statements name their columns, so it need not match the CREATE TABLE).
// Checked by: tests/results/record_schema_test.cpp.
#include "results/record_schema.h"

#include <cmath>
#include <limits>

#include "base/error.h"

namespace specbed {
namespace {

constexpr NotRecorded kNever = NotRecorded::kNever;
constexpr NotRecorded kMinusOne = NotRecorded::kMinusOne;
constexpr NotRecorded kNull = NotRecorded::kNull;

// A record's default value of `f` as an SQL literal (the DEFAULT of an added column).
template <typename R>
std::string DefaultLiteral(const Field<R>& f) {
  const R fresh{};
  std::string out;
  VisitField(fresh, f, [&](const auto& v) {
    using V = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<V, std::string>) {
      out = "'" + v + "'";
    } else if constexpr (std::is_floating_point_v<V>) {
      SPECBED_CHECK(std::isfinite(v), "record_schema: field '", f.name,
                    "' has a NaN default; give it NotRecorded::kNull (a nullable column)");
      out = std::to_string(v);
    } else {
      out = std::to_string(v);
    }
  });
  return out;
}

template <typename R>
void AppendAddedColumns(const char* table, const std::vector<Field<R>>& fields, int version,
                        std::string& sql) {
  for (const Field<R>& f : fields) {
    if (f.since != version) continue;
    sql += StrCat("ALTER TABLE ", table, " ADD COLUMN ", f.name, " ", SqlType(f));
    if (f.not_recorded != NotRecorded::kNull) sql += " NOT NULL DEFAULT " + DefaultLiteral(f);
    sql += ";\n";
  }
}

}  // namespace

StepRecord::StepRecord() {
  for (const Field<StepRecord>& f : StepFields()) {
    if (f.not_recorded != NotRecorded::kMinusOne) continue;
    VisitField(*this, f, [](auto& v) {
      using V = std::decay_t<decltype(v)>;
      if constexpr (!std::is_same_v<V, std::string>) v = static_cast<V>(-1);
    });
  }
}

const std::vector<Field<RunInfo>>& RunFields() {
  using R = RunInfo;
  static const std::vector<Field<R>> kFields = {
      {"started_at", &R::started_at},
      {"specbed_version", &R::specbed_version},
      {"git_commit", &R::git_commit},
      {"build_flags", &R::build_flags},
      {"host", &R::host},
      {"cpu", &R::cpu},
      {"gpu", &R::gpu},
      {"library_versions_json", &R::library_versions_json},
      {"config_json", &R::config_json},
      {"repro_command", &R::repro_command},
  };
  return kFields;
}

const std::vector<Field<CaseRecord>>& CaseFields() {
  using R = CaseRecord;
  static const std::vector<Field<R>> kFields = {
      {"case_key", &R::case_key, 1, kNever, "", "case_key"},
      {"method", &R::method, 1, kNever, "", "method"},
      {"method_knobs_json", &R::method_knobs_json, 1, kNever, "", "knobs"},
      {"method_traits_json", &R::method_traits_json, 2, kNever, "", "method_traits"},
      {"drafter", &R::drafter, 2, kNever, "", "drafter"},
      {"target", &R::target, 1, kNever, "", "target"},
      {"dataset", &R::dataset, 1, kNever, "", "dataset"},
      {"categories", &R::categories, 1, kNever, "", "categories"},
      {"prompt_limit", &R::prompt_limit, 1, kNever, "", "prompt_limit"},
      {"temperature", &R::temperature, 1, kNever, "", "temperature"},
      {"top_p", &R::top_p, 1, kNever, "", "top_p"},
      {"top_k", &R::top_k, 1, kNever, "", "top_k"},
      {"seed", &R::seed, 1, kNever, "", "seed"},
      {"max_new_tokens", &R::max_new_tokens, 1, kNever, "tokens", "max_new_tokens"},
      {"batch_size", &R::batch_size, 1, kNever, "", "batch_size"},
      {"threads", &R::threads, 1, kNever, "", "threads"},
      {"dtype", &R::dtype, 1, kNever, "", "dtype"},
      {"device", &R::device, 1, kNever, "", "device"},
      {"timing_mode", &R::timing_mode, 4, kNever, "", "timing_mode"},
      {"config_json", &R::config_json},
      {"wall_s", &R::wall_s, 1, kNever, "s"},
  };
  return kFields;
}

const std::vector<Field<SampleRecord>>& SampleFields() {
  using R = SampleRecord;
  static const std::vector<Field<R>> kFields = {
      {"prompt_id", &R::prompt_id},
      {"turn", &R::turn},
      {"category", &R::category},
      {"n_prompt_tokens", &R::n_prompt_tokens, 1, kNever, "tokens"},
      {"n_output_tokens", &R::n_output_tokens, 1, kNever, "tokens"},
      {"prefill_ms", &R::prefill_ms, 1, kNever, "ms"},
      {"decode_ms", &R::decode_ms, 1, kNever, "ms"},
      {"n_steps", &R::n_steps},
      {"stop_reason", &R::stop_reason},
      {"output_hash", &R::output_hash},
      {"output_text", &R::output_text},
      {"output_ids_json", &R::output_ids_json},
      {"token_margins_json", &R::token_margins_json, 2},
      {"paired_ar_decode_ms", &R::paired_ar_decode_ms, 4, kNull, "ms"},
      {"paired_ar_output_tokens", &R::paired_ar_output_tokens, 4, kNull, "tokens"},
      {"paired_ar_first", &R::paired_ar_first, 4, kNull},
      {"paired_ar_prefill_ms", &R::paired_ar_prefill_ms, 6, kNull, "ms"},
  };
  return kFields;
}

const std::vector<Field<StepRecord>>& StepFields() {
  using R = StepRecord;
  static const std::vector<Field<R>> kFields = {
      {"step_idx", &R::step_idx},
      {"n_drafted", &R::n_drafted, 1, kNever, "tokens"},
      {"n_accepted", &R::n_accepted, 1, kNever, "tokens"},
      {"n_emitted", &R::n_emitted, 1, kNever, "tokens"},
      {"t_draft_us", &R::t_draft_us, 1, kNever, "us"},
      {"t_verify_us", &R::t_verify_us, 1, kNever, "us"},
      {"t_other_us", &R::t_other_us, 1, kNever, "us"},
      {"draft_depth", &R::draft_depth, 2, kMinusOne, "tokens"},
      {"n_rollback_events", &R::n_rollback_events, 2},
      {"t_adapt_us", &R::t_adapt_us, 3, kNever, "us"},
      {"t_draft_busy_us", &R::t_draft_busy_us, 6, kMinusOne, "us"},
      {"t_verify_busy_us", &R::t_verify_busy_us, 6, kMinusOne, "us"},
      {"n_target_forwards", &R::n_target_forwards, 6, kMinusOne},
      {"n_rolled_back", &R::n_rolled_back, 6, kMinusOne, "tokens"},
      {"n_draft_generated", &R::n_draft_generated, 6, kMinusOne, "tokens"},
      {"n_trimmed", &R::n_trimmed, 10, kMinusOne, "tokens"},
      {"t_draft_prefill_us", &R::t_draft_prefill_us, 10, kMinusOne, "us"},
      {"t_draft_device_us", &R::t_draft_device_us, 12, kMinusOne, "us"},
      {"t_verify_device_us", &R::t_verify_device_us, 12, kMinusOne, "us"},
      {"t_other_device_us", &R::t_other_device_us, 12, kMinusOne, "us"},
      {"n_launches", &R::n_launches, 12, kMinusOne},
      {"n_host_reads", &R::n_host_reads, 12, kMinusOne},
      {"n_graph_replays", &R::n_graph_replays, 12, kMinusOne},
      {"n_graph_captures", &R::n_graph_captures, 12, kMinusOne},
      {"n_h2d_copies", &R::n_h2d_copies, 12, kMinusOne},
      {"n_d2h_copies", &R::n_d2h_copies, 12, kMinusOne},
  };
  return kFields;
}

const std::vector<Field<BenchRecord>>& BenchFields() {
  using R = BenchRecord;
  static const std::vector<Field<R>> kFields = {
      {"model", &R::model},
      {"dtype", &R::dtype},
      {"threads", &R::threads},
      {"batch_size", &R::batch_size},
      {"context_len", &R::context_len, 1, kNever, "tokens"},
      {"n_tokens", &R::n_tokens, 1, kNever, "tokens"},
      {"reps", &R::reps},
      {"tokens_per_s", &R::tokens_per_s, 1, kNever, "tokens/s"},
      {"tokens_per_s_std", &R::tokens_per_s_std, 1, kNever, "tokens/s"},
      {"ms_per_step", &R::ms_per_step, 1, kNever, "ms"},
      {"forward_ms_per_step", &R::forward_ms_per_step, 1, kNever, "ms"},
      {"other_ms_per_step", &R::other_ms_per_step, 1, kNever, "ms"},
      {"n_params", &R::n_params},
      {"weight_bytes", &R::weight_bytes, 5, kMinusOne, "bytes"},
      {"bandwidth_gb_s", &R::bandwidth_gb_s, 5, kNull, "GB/s"},
      {"roofline_fraction", &R::roofline_fraction, 5, kNull},
      {"blas_core", &R::blas_core, 5},
      {"gemv_kernel", &R::gemv_kernel, 11},
      {"huge_page_bytes", &R::huge_page_bytes, 11, kMinusOne, "bytes"},
      {"test", &R::test, 13},
  };
  return kFields;
}

const std::vector<Field<BenchVerifyRecord>>& BenchVerifyFields() {
  using R = BenchVerifyRecord;
  static const std::vector<Field<R>> kFields = {
      {"model", &R::model, 5},
      {"dtype", &R::dtype, 5},
      {"threads", &R::threads, 5},
      {"batch_size", &R::batch_size, 5},
      {"context_len", &R::context_len, 5, kNever, "tokens"},
      {"n_query", &R::n_query, 5, kNever, "tokens"},
      {"reps", &R::reps, 5},
      {"forward_ms", &R::forward_ms, 5, kNever, "ms"},
      {"ratio_to_one", &R::ratio_to_one, 5},
      {"gemv_max_rows", &R::gemv_max_rows, 5},
      {"blas_core", &R::blas_core, 5},
      {"gemv_kernel", &R::gemv_kernel, 11},
  };
  return kFields;
}

const std::vector<Field<BenchBandwidthRecord>>& BenchBandwidthFields() {
  using R = BenchBandwidthRecord;
  static const std::vector<Field<R>> kFields = {
      {"threads", &R::threads, 5},
      {"array_bytes", &R::array_bytes, 5, kNever, "bytes"},
      {"reps", &R::reps, 5},
      {"copy_gb_s", &R::copy_gb_s, 5, kNever, "GB/s"},
      {"triad_gb_s", &R::triad_gb_s, 5, kNever, "GB/s"},
  };
  return kFields;
}

const std::vector<Field<TrainRunRecord>>& TrainRunFields() {
  using R = TrainRunRecord;
  static const std::vector<Field<R>> kFields = {
      {"train_key", &R::train_key, 3},       {"task", &R::task, 3},
      {"out_dir", &R::out_dir, 3},           {"settings_json", &R::settings_json, 3},
      {"started_at", &R::started_at, 3},     {"finished_at", &R::finished_at, 3},
      {"summary_json", &R::summary_json, 3},
  };
  return kFields;
}

const std::vector<Field<TrainLogRow>>& TrainLogFields() {
  using R = TrainLogRow;
  static const std::vector<Field<R>> kFields = {
      {"step", &R::step, 3},
      {"loss", &R::loss, 3},
      {"lr", &R::lr, 3},
      {"grad_norm", &R::grad_norm, 3},
      {"elapsed_s", &R::elapsed_s, 3, kNever, "s"},
  };
  return kFields;
}

const std::vector<Field<TrainEvalRow>>& TrainEvalFields() {
  using R = TrainEvalRow;
  static const std::vector<Field<R>> kFields = {
      {"step", &R::step, 3},
      {"val_loss", &R::val_loss, 3},
      {"acceptance_proxy", &R::acceptance_proxy, 3},
      {"metrics_json", &R::metrics_json, 3},
  };
  return kFields;
}

const std::vector<Field<ServeCellRecord>>& ServeCellFields() {
  using R = ServeCellRecord;
  static const std::vector<Field<R>> kFields = {
      {"cell_key", &R::cell_key, 14},
      {"target", &R::target, 14},
      {"method", &R::method, 14},
      {"method_knobs_json", &R::method_knobs_json, 14},
      {"dataset", &R::dataset, 14},
      {"mode", &R::mode, 14},
      {"concurrency", &R::concurrency, 14},
      {"rate", &R::rate, 14, kNever, "1/s"},
      {"max_running", &R::max_running, 14},
      {"schedule", &R::schedule, 14},
      {"schedule_json", &R::schedule_json, 14},
      {"n_requests", &R::n_requests, 14},
      {"max_new_tokens", &R::max_new_tokens, 14, kNever, "tokens"},
      {"temperature", &R::temperature, 14},
      {"seed", &R::seed, 14},
      {"dtype", &R::dtype, 14},
      {"device", &R::device, 14},
      {"threads", &R::threads, 14},
      {"batch_invariant", &R::batch_invariant, 14},
      {"config_json", &R::config_json, 14},
      {"method_traits_json", &R::method_traits_json, 14},
      {"makespan_ms", &R::makespan_ms, 14, kNever, "ms"},
      {"wall_s", &R::wall_s, 14, kNever, "s"},
  };
  return kFields;
}

const std::vector<Field<ServeRequestRecord>>& ServeRequestFields() {
  using R = ServeRequestRecord;
  static const std::vector<Field<R>> kFields = {
      {"request_index", &R::request_index, 14},
      {"prompt_id", &R::prompt_id, 14},
      {"n_prompt_tokens", &R::n_prompt_tokens, 14, kNever, "tokens"},
      {"n_output_tokens", &R::n_output_tokens, 14, kNever, "tokens"},
      {"arrival_ms", &R::arrival_ms, 14, kNever, "ms"},
      {"admitted_ms", &R::admitted_ms, 14, kNever, "ms"},
      {"first_token_ms", &R::first_token_ms, 14, kNever, "ms"},
      {"finish_ms", &R::finish_ms, 14, kNever, "ms"},
      {"emits_json", &R::emits_json, 14},
      {"n_steps", &R::n_steps, 14},
      {"n_drafted", &R::n_drafted, 14, kNever, "tokens"},
      {"n_accepted", &R::n_accepted, 14, kNever, "tokens"},
      {"n_drafts", &R::n_drafts, 14},
      {"stop_reason", &R::stop_reason, 14},
      {"output_hash", &R::output_hash, 14},
      {"output_ids_json", &R::output_ids_json, 14},
      {"t_adapt_ms", &R::t_adapt_ms, 14, kNever, "ms"},
  };
  return kFields;
}

const std::vector<Field<ServeStepRecord>>& ServeStepFields() {
  using R = ServeStepRecord;
  static const std::vector<Field<R>> kFields = {
      {"step_index", &R::step_index, 14},
      {"start_ms", &R::start_ms, 14, kNever, "ms"},
      {"batch_size", &R::batch_size, 14},
      {"n_admitted", &R::n_admitted, 14},
      {"n_verify_tokens", &R::n_verify_tokens, 14, kNever, "tokens"},
      {"n_drafted", &R::n_drafted, 14, kNever, "tokens"},
      {"n_accepted", &R::n_accepted, 14, kNever, "tokens"},
      {"n_emitted", &R::n_emitted, 14, kNever, "tokens"},
      {"k_chosen", &R::k_chosen, 14, kNever, "tokens"},
      {"t_prefill_ms", &R::t_prefill_ms, 14, kNever, "ms"},
      {"t_draft_ms", &R::t_draft_ms, 14, kNever, "ms"},
      {"t_verify_ms", &R::t_verify_ms, 14, kNever, "ms"},
      {"t_other_ms", &R::t_other_ms, 14, kNever, "ms"},
      {"t_adapt_ms", &R::t_adapt_ms, 14, kNever, "ms"},
  };
  return kFields;
}

// The append-only triggers of a generated table (as the tables of version 1 carry them).
#define SPECBED_APPEND_ONLY(table)                                           \
  "CREATE TRIGGER " table "_no_update BEFORE UPDATE ON " table               \
  "\n  BEGIN SELECT RAISE(ABORT, 'specbed results are append-only'); END;\n" \
  "CREATE TRIGGER " table "_no_delete BEFORE DELETE ON " table               \
  "\n  BEGIN SELECT RAISE(ABORT, 'specbed results are append-only'); END;\n"

const char* const kServeCellKeysSql =
    "cell_id INTEGER PRIMARY KEY, run_id INTEGER NOT NULL REFERENCES runs(run_id), "
    "completed_at TEXT NOT NULL";
const char* const kServeCellIndexSql =
    "CREATE UNIQUE INDEX serve_cells_by_key ON serve_cells(cell_key);\n"
    "CREATE INDEX serve_cells_by_run ON serve_cells(run_id);\n" SPECBED_APPEND_ONLY("serve_cells");
const char* const kServeRequestKeysSql =
    "serve_request_id INTEGER PRIMARY KEY, cell_id INTEGER NOT NULL REFERENCES "
    "serve_cells(cell_id)";
const char* const kServeRequestIndexSql =
    "CREATE UNIQUE INDEX serve_requests_by_cell ON serve_requests(cell_id, "
    "request_index);\n" SPECBED_APPEND_ONLY("serve_requests");
const char* const kServeStepKeysSql =
    "serve_step_id INTEGER PRIMARY KEY, cell_id INTEGER NOT NULL REFERENCES serve_cells(cell_id)";
const char* const kServeStepIndexSql =
    "CREATE UNIQUE INDEX serve_steps_by_cell ON serve_steps(cell_id, "
    "step_index);\n" SPECBED_APPEND_ONLY("serve_steps");

#undef SPECBED_APPEND_ONLY

std::string AddedColumnsSql(int version) {
  SPECBED_CHECK(version >= kFirstGeneratedVersion, "AddedColumnsSql(", version,
                "): versions before ", kFirstGeneratedVersion, " have hand-written migrations");
  std::string sql;
  ForEachRecordTable([&](const TableInfo& t, const auto& fields) {
    if (t.since < version) AppendAddedColumns(t.table, fields, version, sql);
  });
  return sql;
}

std::string CreatedTablesSql(int version) {
  SPECBED_CHECK(version >= kFirstGeneratedVersion, "CreatedTablesSql(", version,
                "): versions before ", kFirstGeneratedVersion, " have hand-written migrations");
  std::string sql;
  ForEachRecordTable([&](const TableInfo& t, const auto& fields) {
    if (t.since != version) return;
    sql += StrCat("CREATE TABLE ", t.table, " (\n  ", t.key_columns_sql);
    for (const auto& f : fields) {
      SPECBED_CHECK(f.since == version, "record_schema: ", t.table, ".", f.name, " has since ",
                    f.since, " but its table was created by version ", version);
      // REAL columns are nullable so that NaN (stored as NULL) round-trips, as in version 1.
      const bool nullable =
          f.not_recorded == NotRecorded::kNull || std::string(SqlType(f)) == "REAL";
      sql += StrCat(",\n  ", f.name, " ", SqlType(f), nullable ? "" : " NOT NULL");
    }
    sql += StrCat("\n) STRICT;\n", t.after_create_sql);
  });
  return sql;
}

std::string GeneratedMigrationSql(int version) {
  return CreatedTablesSql(version) + AddedColumnsSql(version);
}

}  // namespace specbed
