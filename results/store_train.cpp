// ResultsStore's drafter training logs (schema v3): train_runs, train_log, train_eval (store.h).
// Checked by: tests/results/store_test.cpp (TrainLog*), tests/results/record_schema_test.cpp.
#include <sqlite3.h>

#include <functional>
#include <string>
#include <vector>

#include "base/error.h"
#include "base/timer.h"
#include "results/record_schema.h"
#include "results/sql_rows.h"
#include "results/store.h"

namespace specbed {

using namespace sql_rows;  // NOLINT(build/namespaces): the store's own helpers

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
    OwnedStmt s(Prepare(InsertSql("train_runs", {}, TrainRunFields()).c_str()));
    TrainRunRecord row = run;  // bound without a copy: must live until the step
    if (row.started_at.empty()) row.started_at = NowRfc3339();
    BindFields(s.get(), 1, row, TrainRunFields());
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
    OwnedStmt s(Prepare(InsertSql("train_log", {"train_id"}, TrainLogFields()).c_str()));
    for (const TrainLogRow& r : log) {
      ResetOnExit reset(s.get());
      BindInt(s.get(), 1, train_id);
      BindFields(s.get(), 2, r, TrainLogFields());
      StepOnce(s.get(), [&](int rc) {
        if ((rc & 0xff) == SQLITE_CONSTRAINT) {
          Fail("results database '", path_, "': training run ", train_id,
               " already has a log row for step ", r.step, " (or the run does not exist)");
        }
        FailSqlite(rc, "writing a training log row");
      });
    }
    const std::string insert_eval = InsertSql("train_eval", {"train_id"}, TrainEvalFields());
    OwnedStmt e(Prepare(("INSERT OR REPLACE" + insert_eval.substr(6)).c_str()));
    for (const TrainEvalRow& r : evals) {
      ResetOnExit reset(e.get());
      BindInt(e.get(), 1, train_id);
      BindFields(e.get(), 2, r, TrainEvalFields());
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
  OwnedStmt s(Prepare(StrCat("SELECT train_id, ", ColumnList(TrainRunFields(), schema_version_),
                             " FROM train_runs ORDER BY train_id")
                          .c_str()));
  ForEachRow(s.get(), "listing training runs", [&](sqlite3_stmt* q) {
    TrainRunRow r;
    r.train_id = ColInt(q, 0);
    ReadFields(q, 1, schema_version_, r.record, TrainRunFields());
    out.push_back(std::move(r));
  });
  return out;
}

std::vector<TrainLogRow> ResultsStore::LoadTrainLog(int64_t train_id) const {
  return LoadKeyedRows("train_log", "train_id", "step", TrainLogFields(), 3, train_id);
}

std::vector<TrainEvalRow> ResultsStore::LoadTrainEval(int64_t train_id) const {
  return LoadKeyedRows("train_eval", "train_id", "step", TrainEvalFields(), 3, train_id);
}

}  // namespace specbed
