// The one list of every stored field: for each record kind (run, case, sample, step, bench row,
// verify-width point, bandwidth row, training run / log / evaluation) a table of its fields —
// column name (= export key), C++ member, the schema version that added it, how "not recorded"
// is written, unit, and its key in the summary JSON. The store's INSERT and SELECT statements,
// the columns a newer field adds to an older database (ALTER TABLE, from version
// kFirstGeneratedVersion on), what a file of an older version reads back, the samples/steps
// export and the summary's case identity are all built from these tables; the column meanings
// are in results/README.md, which a test checks against them. A new field is one line here (and
// its member and producer): see results/README.md, "Adding a field".
// Checked by: tests/results/record_schema_test.cpp (every field is a column of its table with its
// type, every column is a field, every field is documented and exported, every earlier schema
// version opens and reads back what it held).
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "results/serve_records.h"
#include "results/store.h"

namespace specbed {

// How a field says "not recorded" (rows written before its version, or a producer that does not
// measure it).
enum class NotRecorded {
  kNever,     // always a value (NaN reals still export as null)
  kMinusOne,  // a negative value; stored as it is (NOT NULL DEFAULT -1), exported as null
  kNull,      // -1 / NaN; stored as SQL NULL (a nullable column), exported as null
};

template <typename Record>
struct Field {
  using Member = std::variant<std::string Record::*, int64_t Record::*, int32_t Record::*,
                              uint64_t Record::*, double Record::*>;
  const char* name;  // SQL column and export key
  Member member;
  int since = 1;  // schema version that added the column
  NotRecorded not_recorded = NotRecorded::kNever;
  const char* unit = "";  // "us", "ms", "s", "tokens", "bytes", "GB/s", "" = none
  // Key in the summary JSON's case object (reports/summary.cpp) and the cases export; nullptr =
  // not shown there. Fields stored as JSON text are shown parsed.
  const char* summary = nullptr;
};

// The SQL type of a member: TEXT, INTEGER (integers; a uint64 seed is stored bit-cast) or REAL.
template <typename Record>
const char* SqlType(const Field<Record>& f) {
  switch (f.member.index()) {
    case 0:
      return "TEXT";
    case 4:
      return "REAL";
    default:
      return "INTEGER";
  }
}

// Calls `fn(value)` with a reference to the field's member in `record` (const or not).
template <typename Record, typename Fn>
void VisitField(Record& record, const Field<std::remove_const_t<Record>>& f, Fn&& fn) {
  std::visit([&](auto member) { fn(record.*member); }, f.member);
}

// Whether `value` is the field's "not recorded" value.
template <typename V>
bool IsNotRecorded(NotRecorded rule, const V& value) {
  if constexpr (std::is_floating_point_v<V>) {
    return rule != NotRecorded::kNever && (value != value || value < 0);  // NaN or negative
  } else if constexpr (std::is_signed_v<V>) {
    return rule != NotRecorded::kNever && value < 0;
  } else {
    return false;
  }
}

// The schema version from which the column migrations are generated from the field tables
// (ALTER TABLE ... ADD COLUMN for each field whose `since` is the new version); versions up to
// kFirstGeneratedVersion - 1 keep their hand-written migrations in store.cpp.
inline constexpr int kFirstGeneratedVersion = 12;

// The tables. Columns that are keys or computed by the store (run_id, case_id, sample_id,
// step_id, n_samples, n_steps, completed_at, ...) are not fields; StepRecord's prompt_id and turn
// come from its sample (the steps table stores sample_id).
const std::vector<Field<RunInfo>>& RunFields();
const std::vector<Field<CaseRecord>>& CaseFields();
const std::vector<Field<SampleRecord>>& SampleFields();
const std::vector<Field<StepRecord>>& StepFields();
const std::vector<Field<BenchRecord>>& BenchFields();
const std::vector<Field<BenchVerifyRecord>>& BenchVerifyFields();
const std::vector<Field<BenchBandwidthRecord>>& BenchBandwidthFields();
const std::vector<Field<TrainRunRecord>>& TrainRunFields();
const std::vector<Field<TrainLogRow>>& TrainLogFields();
const std::vector<Field<TrainEvalRow>>& TrainEvalFields();
// Schema v14: `specbed serve` (results/serve_records.h).
const std::vector<Field<ServeCellRecord>>& ServeCellFields();
const std::vector<Field<ServeRequestRecord>>& ServeRequestFields();
const std::vector<Field<ServeStepRecord>>& ServeStepFields();

// One record kind's table: its SQL table, the version that created it, and the key / computed
// columns beside the fields (for the schema test and the docs). A table created by a generated
// migration (since >= kFirstGeneratedVersion) also carries the DDL of those columns (written
// before the fields' columns in its CREATE TABLE) and the statements that follow it (indexes,
// append-only triggers); the tables of earlier versions keep their hand-written DDL.
struct TableInfo {
  const char* table;
  int since;
  std::vector<std::string> other_columns;
  const char* key_columns_sql = "";
  const char* after_create_sql = "";
};

// The serve tables' key columns and what follows their CREATE TABLE (schema v14): unique cell
// keys, one row per (cell, request_index) and per (cell, step_index), append-only triggers.
extern const char* const kServeCellKeysSql;
extern const char* const kServeCellIndexSql;
extern const char* const kServeRequestKeysSql;
extern const char* const kServeRequestIndexSql;
extern const char* const kServeStepKeysSql;
extern const char* const kServeStepIndexSql;

// Calls `fn(const TableInfo&, const std::vector<Field<R>>&)` for every table, in schema order.
template <typename Fn>
void ForEachRecordTable(Fn&& fn) {
  fn(TableInfo{"runs", 1, {"run_id"}}, RunFields());
  fn(TableInfo{"cases", 1, {"case_id", "run_id", "n_samples", "n_steps", "completed_at"}},
     CaseFields());
  fn(TableInfo{"samples", 1, {"sample_id", "case_id"}}, SampleFields());
  fn(TableInfo{"steps", 1, {"step_id", "case_id", "sample_id"}}, StepFields());
  fn(TableInfo{"bench", 1, {"bench_id", "run_id"}}, BenchFields());
  fn(TableInfo{"bench_verify", 5, {"bench_verify_id", "run_id"}}, BenchVerifyFields());
  fn(TableInfo{"bench_bandwidth", 5, {"bandwidth_id", "run_id"}}, BenchBandwidthFields());
  fn(TableInfo{"train_runs", 3, {"train_id"}}, TrainRunFields());
  fn(TableInfo{"train_log", 3, {"train_id"}}, TrainLogFields());
  fn(TableInfo{"train_eval", 3, {"train_id"}}, TrainEvalFields());
  fn(TableInfo{"serve_cells",
               14,
               {"cell_id", "run_id", "completed_at"},
               kServeCellKeysSql,
               kServeCellIndexSql},
     ServeCellFields());
  fn(TableInfo{"serve_requests",
               14,
               {"serve_request_id", "cell_id"},
               kServeRequestKeysSql,
               kServeRequestIndexSql},
     ServeRequestFields());
  fn(
      TableInfo{
          "serve_steps", 14, {"serve_step_id", "cell_id"}, kServeStepKeysSql, kServeStepIndexSql},
      ServeStepFields());
}

// "ALTER TABLE ... ADD COLUMN ..." for every field added by `version` (>= kFirstGeneratedVersion)
// to a table of an earlier version: NOT NULL DEFAULT <the record's default> unless its rule is
// kNull. "" when none.
std::string AddedColumnsSql(int version);
// "CREATE TABLE ... STRICT" for every table created by `version` (>= kFirstGeneratedVersion): its
// key columns, then one column per field (REAL columns and kNull fields nullable, the others NOT
// NULL), then its indexes and triggers. "" when none.
std::string CreatedTablesSql(int version);
// The migration of version `version - 1` to `version` generated from the tables: the tables it
// creates, then the columns it adds.
std::string GeneratedMigrationSql(int version);

}  // namespace specbed
