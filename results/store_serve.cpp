// ResultsStore's `specbed serve` tables (schema v14): serve_cells, serve_requests, serve_steps
// (store.h, results/serve_records.h). A cell is written with all its requests and steps in one
// transaction; a cell key already stored is an error (a serve sweep asks HasServeCell first).
// Checked by: tests/results/serve_store_test.cpp (round trip, resume, duplicate key, invalid rows,
// a v13 file gaining the tables, read-only opens), tests/results/record_schema_test.cpp.
#include <sqlite3.h>

#include <cmath>
#include <set>
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

constexpr int kServeSchemaVersion = 14;

// a <= b for times that were measured (NaN compares as "not checked").
bool NotAfter(double a, double b) {
  return !(a > b);
}

}  // namespace

void ResultsStore::ValidateServeCell(const ServeCellRecord& cell,
                                     const std::vector<ServeRequestRecord>& requests,
                                     const std::vector<ServeStepRecord>& steps) const {
  const std::string where = StrCat("results database '", path_, "': serve cell '", cell.cell_key);
  SPECBED_CHECK(!cell.cell_key.empty(), "results database '", path_,
                "': cannot write a serve cell with an empty cell_key (method '", cell.method, "')");
  SPECBED_CHECK(cell.mode == "closed" || cell.mode == "open", where, "' has mode '", cell.mode,
                "'; expected closed or open");
  SPECBED_CHECK(cell.mode != "closed" || cell.concurrency >= 1, where,
                "' is closed-loop with concurrency ", cell.concurrency, "; expected >= 1");
  SPECBED_CHECK(cell.mode != "open" || cell.rate > 0, where, "' is open-loop with rate ", cell.rate,
                "; expected > 0 requests/s");
  SPECBED_CHECK(static_cast<int64_t>(requests.size()) == cell.n_requests, where, "' has ",
                requests.size(), " request rows but n_requests ", cell.n_requests,
                "; a cell stores every request of its trace");
  std::set<int64_t> indexes;
  for (const ServeRequestRecord& r : requests) {
    SPECBED_CHECK(r.request_index >= 0 && indexes.insert(r.request_index).second, where,
                  "' has request_index ", r.request_index,
                  r.request_index < 0 ? " (negative)" : " twice");
    const bool counts_ok = r.n_output_tokens >= 0 && r.n_steps >= 0 && r.n_drafts >= 0 &&
                           r.n_accepted >= 0 && r.n_accepted <= r.n_drafted;
    SPECBED_CHECK(counts_ok, where, "', request ", r.request_index, " has n_output_tokens ",
                  r.n_output_tokens, ", n_steps ", r.n_steps, ", n_drafted ", r.n_drafted,
                  ", n_accepted ", r.n_accepted, ", n_drafts ", r.n_drafts,
                  "; expected counts >= 0 and n_accepted <= n_drafted");
    const bool times_ok = NotAfter(r.arrival_ms, r.admitted_ms) &&
                          NotAfter(r.admitted_ms, r.first_token_ms) &&
                          NotAfter(r.first_token_ms, r.finish_ms);
    SPECBED_CHECK(times_ok, where, "', request ", r.request_index, " has arrival_ms ", r.arrival_ms,
                  ", admitted_ms ", r.admitted_ms, ", first_token_ms ", r.first_token_ms,
                  ", finish_ms ", r.finish_ms,
                  "; expected arrival <= admitted <= first token <= finish");
  }
  for (const ServeStepRecord& st : steps) {
    const bool ok = st.batch_size >= 0 && st.n_admitted >= 0 && st.n_verify_tokens >= 0 &&
                    st.n_accepted >= 0 && st.n_accepted <= st.n_drafted && st.n_emitted >= 0 &&
                    st.k_chosen >= 0;
    SPECBED_CHECK(ok, where, "', step ", st.step_index, " has batch_size ", st.batch_size,
                  ", n_admitted ", st.n_admitted, ", n_verify_tokens ", st.n_verify_tokens,
                  ", n_drafted ", st.n_drafted, ", n_accepted ", st.n_accepted, ", n_emitted ",
                  st.n_emitted, ", k_chosen ", st.k_chosen,
                  "; expected counts >= 0 and n_accepted <= n_drafted");
  }
}

int64_t ResultsStore::FindServeCell(const std::string& cell_key) const {
  if (schema_version_ < kServeSchemaVersion) return -1;
  OwnedStmt s(Prepare("SELECT cell_id FROM serve_cells WHERE cell_key = ?1"));
  BindText(s.get(), 1, cell_key);
  int64_t id = -1;
  ForEachRow(s.get(), StrCat("looking up serve cell '", cell_key, "'"),
             [&](sqlite3_stmt* q) { id = ColInt(q, 0); });
  return id;
}

bool ResultsStore::HasServeCell(const std::string& cell_key) const {
  op_start_us_ = NowMicros();
  return FindServeCell(cell_key) >= 0;
}

int64_t ResultsStore::AddServeCell(int64_t run_id, const ServeCellRecord& cell,
                                   const std::vector<ServeRequestRecord>& requests,
                                   const std::vector<ServeStepRecord>& steps) {
  CheckWritable();
  ValidateServeCell(cell, requests, steps);  // before taking the write lock
  int64_t cell_id = -1;
  InTransaction("writing a serve cell", [&] {
    const int64_t existing = FindServeCell(cell.cell_key);
    SPECBED_CHECK(existing < 0, "results database '", path_, "': serve cell '", cell.cell_key,
                  "' is already stored (cell_id ", existing,
                  "); cells are never rewritten: skip stored keys (HasServeCell) or write to "
                  "another results file");
    CheckRunExists(run_id, StrCat("serve cell '", cell.cell_key, "'"));
    {
      OwnedStmt s(
          Prepare(InsertSql("serve_cells", {"run_id", "completed_at"}, ServeCellFields()).c_str()));
      const std::string completed = NowRfc3339();
      BindAll(s.get(), 1, run_id, completed);
      BindFields(s.get(), 3, cell, ServeCellFields());
      const int rc = sqlite3_step(s.get());
      if (rc != SQLITE_DONE) FailSqlite(rc, StrCat("writing serve cell '", cell.cell_key, "'"));
      cell_id = sqlite3_last_insert_rowid(db_);
    }
    const std::string what = StrCat(" of serve cell '", cell.cell_key, "'");
    OwnedStmt req(Prepare(InsertSql("serve_requests", {"cell_id"}, ServeRequestFields()).c_str()));
    for (const ServeRequestRecord& r : requests) {
      ResetOnExit reset(req.get());
      BindInt(req.get(), 1, cell_id);
      BindFields(req.get(), 2, r, ServeRequestFields());
      const int rc = sqlite3_step(req.get());
      if (rc != SQLITE_DONE) FailSqlite(rc, StrCat("writing request ", r.request_index, what));
    }
    OwnedStmt step(Prepare(InsertSql("serve_steps", {"cell_id"}, ServeStepFields()).c_str()));
    for (const ServeStepRecord& st : steps) {
      ResetOnExit reset(step.get());
      BindInt(step.get(), 1, cell_id);
      BindFields(step.get(), 2, st, ServeStepFields());
      const int rc = sqlite3_step(step.get());
      if ((rc & 0xff) == SQLITE_CONSTRAINT) {
        Fail("results database '", path_, "': serve cell '", cell.cell_key,
             "' has two steps with step_index ", st.step_index);
      }
      if (rc != SQLITE_DONE) FailSqlite(rc, StrCat("writing step ", st.step_index, what));
    }
  });
  return cell_id;
}

std::vector<ResultsStore::ServeCellRow> ResultsStore::ServeCells() const {
  op_start_us_ = NowMicros();
  std::vector<ServeCellRow> out;
  if (schema_version_ < kServeSchemaVersion) return out;
  OwnedStmt s(Prepare(
      StrCat("SELECT cell_id, run_id, completed_at, (SELECT host || ' / ' || cpu || ' / ' || gpu "
             "FROM runs r WHERE r.run_id = serve_cells.run_id), ",
             ColumnList(ServeCellFields(), schema_version_), " FROM serve_cells ORDER BY cell_id")
          .c_str()));
  ForEachRow(s.get(), "listing serve cells", [&](sqlite3_stmt* q) {
    ServeCellRow row;
    ReadAll(q, 0, row.cell_id, row.run_id, row.completed_at, row.machine);
    ReadFields(q, 4, schema_version_, row.record, ServeCellFields());
    out.push_back(std::move(row));
  });
  return out;
}

std::vector<ServeRequestRecord> ResultsStore::ServeRequests(int64_t cell_id) const {
  std::vector<ServeRequestRecord> out;
  if (schema_version_ < kServeSchemaVersion) return out;
  QueryRows(StrCat("SELECT ", ColumnList(ServeRequestFields(), schema_version_),
                   " FROM serve_requests WHERE cell_id = ?1 ORDER BY request_index"),
            cell_id, StrCat("the requests of serve cell ", cell_id), [&](sqlite3_stmt* q) {
              out.push_back(ReadRecord(q, 0, schema_version_, ServeRequestFields()));
            });
  return out;
}

std::vector<ServeStepRecord> ResultsStore::ServeSteps(int64_t cell_id) const {
  std::vector<ServeStepRecord> out;
  if (schema_version_ < kServeSchemaVersion) return out;
  QueryRows(StrCat("SELECT ", ColumnList(ServeStepFields(), schema_version_),
                   " FROM serve_steps WHERE cell_id = ?1 ORDER BY step_index"),
            cell_id, StrCat("the steps of serve cell ", cell_id), [&](sqlite3_stmt* q) {
              out.push_back(ReadRecord(q, 0, schema_version_, ServeStepFields()));
            });
  return out;
}

}  // namespace specbed
