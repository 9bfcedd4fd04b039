// Tests for the `specbed serve` tables of the results store (schema v14, results/serve_records.h,
// results/store_serve.cpp): a cell round-trips with its requests and steps across a reopen, a
// sweep resumes by HasServeCell, a stored key is an error naming it that writes nothing, invalid
// rows are refused before anything is written, the rows are append-only, a v13 file opens
// read-only without serve cells and read-write gains the empty tables, a read-only store refuses
// serve writes, and merging copies serve cells once.
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "base/error.h"
#include "results/merge.h"
#include "results/record_schema.h"
#include "results/store.h"
#include "tests/common/results_records.h"
#include "tests/common/test_util.h"

namespace specbed {
namespace {

using testing::ErrorOf;

std::string FreshDbPath(const std::string& name) {
  return testing::ScratchDb("serve_" + name);
}

RunInfo MakeRun() {
  return testing::TypicalRunInfo(R"({"serve":{"concurrency":[1,2]}})", "specbed serve --c 1,2");
}

ServeCellRecord MakeCell(const std::string& key, int64_t concurrency, int64_t n_requests) {
  ServeCellRecord c;
  c.cell_key = key;
  c.target = "tiny-llama";
  c.method = "eagle3";
  c.method_knobs_json = R"({"depth":4})";
  c.dataset = "mt_bench";
  c.mode = "closed";
  c.concurrency = concurrency;
  c.max_running = concurrency;
  c.schedule = "by_batch";
  c.schedule_json = R"({"policy":"by_batch","k":{"1":4,"4":2}})";
  c.n_requests = n_requests;
  c.max_new_tokens = 64;
  c.temperature = 0.5;
  c.seed = std::numeric_limits<uint64_t>::max() - 7;  // does not fit in int64
  c.dtype = "bfloat16";
  c.device = "cuda:0";
  c.threads = 2;
  c.batch_invariant = 0;
  c.config_json = R"({"cell":")" + key + R"("})";
  c.method_traits_json = R"({"speculative":true})";
  c.makespan_ms = 1234.5;
  c.wall_s = 3.25;
  return c;
}

std::vector<ServeRequestRecord> MakeRequests(int n) {
  std::vector<ServeRequestRecord> out;
  for (int i = 0; i < n; ++i) {
    ServeRequestRecord r;
    r.request_index = i;
    r.prompt_id = "p" + std::to_string(i);
    r.n_prompt_tokens = 30 + i;
    r.n_output_tokens = 5 + i;
    r.arrival_ms = 10.0 * i;
    r.admitted_ms = 10.0 * i + 0.5;
    r.first_token_ms = 10.0 * i + 2.25;
    r.finish_ms = 10.0 * i + 40.125;
    r.emits_json = "[[" + std::to_string(10 * i + 20) + ",3],[" + std::to_string(10 * i + 40) +
                   ".125," + std::to_string(1 + i) + "]]";
    r.n_steps = 2;
    r.n_drafted = 8;
    r.n_accepted = 2 + i % 3;
    r.n_drafts = 2;
    r.stop_reason = i % 2 ? "eos" : "max_new_tokens";
    r.output_hash = "0123456789abcde" + std::to_string(i % 10);
    r.output_ids_json = "[1,2," + std::to_string(i) + "]";
    r.t_adapt_ms = i == 1 ? 0.75 : 0;
    out.push_back(r);
  }
  return out;
}

std::vector<ServeStepRecord> MakeSteps(int n) {
  std::vector<ServeStepRecord> out;
  for (int k = 0; k < n; ++k) {
    ServeStepRecord st;
    st.step_index = k;
    st.start_ms = 2.5 * k;
    st.batch_size = 1 + k % 2;
    st.n_admitted = k == 0 ? 2 : 0;
    st.n_verify_tokens = k == 0 ? 0 : 5 * st.batch_size;
    st.n_drafted = k == 0 ? 0 : 4 * st.batch_size;
    st.n_accepted = k == 0 ? 0 : k % 4;
    st.n_emitted = k == 0 ? 2 : st.n_accepted + st.batch_size;
    st.k_chosen = 4;
    st.t_prefill_ms = k == 0 ? 1.5 : 0;
    st.t_draft_ms = 0.25 * k;
    st.t_verify_ms = 1.125;
    st.t_other_ms = 0.0625;
    st.t_adapt_ms = 0;
    out.push_back(st);
  }
  return out;
}

auto Fields(const ServeCellRecord& c) {
  return std::tie(c.cell_key, c.target, c.method, c.method_knobs_json, c.dataset, c.mode,
                  c.concurrency, c.rate, c.max_running, c.schedule, c.schedule_json, c.n_requests,
                  c.max_new_tokens, c.temperature, c.seed, c.dtype, c.device, c.threads,
                  c.batch_invariant, c.config_json, c.method_traits_json, c.makespan_ms, c.wall_s);
}
auto Fields(const ServeRequestRecord& r) {
  return std::tie(r.request_index, r.prompt_id, r.n_prompt_tokens, r.n_output_tokens, r.arrival_ms,
                  r.admitted_ms, r.first_token_ms, r.finish_ms, r.emits_json, r.n_steps,
                  r.n_drafted, r.n_accepted, r.n_drafts, r.stop_reason, r.output_hash,
                  r.output_ids_json, r.t_adapt_ms);
}
auto Fields(const ServeStepRecord& st) {
  return std::tie(st.step_index, st.start_ms, st.batch_size, st.n_admitted, st.n_verify_tokens,
                  st.n_drafted, st.n_accepted, st.n_emitted, st.k_chosen, st.t_prefill_ms,
                  st.t_draft_ms, st.t_verify_ms, st.t_other_ms, st.t_adapt_ms);
}

// The compared fields are every field of the table (a field added later must be compared too).
TEST(ServeStore, ComparedFieldsCoverEveryColumn) {
  EXPECT_EQ(std::tuple_size_v<decltype(Fields(ServeCellRecord{}))>, ServeCellFields().size());
  EXPECT_EQ(std::tuple_size_v<decltype(Fields(ServeRequestRecord{}))>, ServeRequestFields().size());
  EXPECT_EQ(std::tuple_size_v<decltype(Fields(ServeStepRecord{}))>, ServeStepFields().size());
}

std::string RawExec(const std::string& path, const std::string& sql) {
  sqlite3* db = nullptr;
  sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE, nullptr);
  char* err = nullptr;
  const int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err);
  std::string out = rc == SQLITE_OK ? "" : (err ? err : "error");
  sqlite3_free(err);
  sqlite3_close(db);
  return out;
}

TEST(ServeStore, RoundTripsACellWithItsRequestsAndStepsAcrossReopen) {
  const std::string path = FreshDbPath("round_trip");
  const ServeCellRecord open_cell = [] {
    ServeCellRecord c = MakeCell("open-1", 0, 2);
    c.mode = "open";
    c.rate = 2.5;
    c.makespan_ms = std::numeric_limits<double>::quiet_NaN();  // NaN round-trips (NULL)
    return c;
  }();
  int64_t closed_id = 0, open_id = 0;
  {
    auto store = ResultsStore::Open(path);
    const int64_t run_id = store->BeginRun(MakeRun());
    closed_id =
        store->AddServeCell(run_id, MakeCell("closed-2", 2, 4), MakeRequests(4), MakeSteps(7));
    open_id = store->AddServeCell(run_id, open_cell, MakeRequests(2), {});
    EXPECT_NE(closed_id, open_id);
  }
  StoreOptions read_only;
  read_only.read_only = true;
  auto store = ResultsStore::Open(path, read_only);
  const auto cells = store->ServeCells();
  ASSERT_EQ(cells.size(), 2u);
  EXPECT_EQ(cells[0].cell_id, closed_id);
  EXPECT_EQ(cells[0].run_id, 1);
  EXPECT_EQ(cells[0].machine, "testhost / Some CPU @ 3GHz (16 cores) / ");
  EXPECT_FALSE(cells[0].completed_at.empty());
  EXPECT_EQ(Fields(cells[0].record), Fields(MakeCell("closed-2", 2, 4)));
  EXPECT_TRUE(std::isnan(cells[1].record.makespan_ms));
  EXPECT_EQ(cells[1].record.mode, "open");
  EXPECT_EQ(cells[1].record.rate, 2.5);
  const auto requests = store->ServeRequests(closed_id);
  const auto want_requests = MakeRequests(4);
  ASSERT_EQ(requests.size(), want_requests.size());
  for (size_t i = 0; i < requests.size(); ++i)
    EXPECT_EQ(Fields(requests[i]), Fields(want_requests[i]));
  const auto steps = store->ServeSteps(closed_id);
  const auto want_steps = MakeSteps(7);
  ASSERT_EQ(steps.size(), want_steps.size());
  for (size_t i = 0; i < steps.size(); ++i) EXPECT_EQ(Fields(steps[i]), Fields(want_steps[i]));
  EXPECT_EQ(store->ServeRequests(open_id).size(), 2u);
  EXPECT_TRUE(store->ServeSteps(open_id).empty());
  EXPECT_TRUE(store->ServeRequests(999).empty());
  EXPECT_EQ(store->CountRows("serve_cells"), 2);
  EXPECT_EQ(store->CountRows("serve_requests"), 6);
  EXPECT_EQ(store->CountRows("serve_steps"), 7);
  // Serve cells are not cases: the cases tables stay empty.
  EXPECT_TRUE(store->ListCases().empty());
}

TEST(ServeStore, ResumeSkipsStoredCellsAndADuplicateKeyIsAnErrorThatWritesNothing) {
  const std::string path = FreshDbPath("resume");
  auto store = ResultsStore::Open(path);
  const int64_t run1 = store->BeginRun(MakeRun());
  store->AddServeCell(run1, MakeCell("c1", 1, 2), MakeRequests(2), MakeSteps(3));
  // A resumed sweep: a new run, only the missing cells written.
  const int64_t run2 = store->BeginRun(MakeRun());
  int written = 0;
  for (const auto& [key, c] : std::vector<std::pair<std::string, int64_t>>{{"c1", 1}, {"c2", 2}}) {
    if (store->HasServeCell(key)) continue;
    store->AddServeCell(run2, MakeCell(key, c, 2), MakeRequests(2), MakeSteps(3));
    ++written;
  }
  EXPECT_EQ(written, 1);
  EXPECT_TRUE(store->HasServeCell("c2"));
  EXPECT_FALSE(store->HasServeCell("c3"));
  ASSERT_EQ(store->ServeCells().size(), 2u);
  EXPECT_EQ(store->ServeCells()[1].run_id, run2);
  // Writing a stored key again fails naming it and its cell, and writes no row.
  const std::string error = ErrorOf(
      [&] { store->AddServeCell(run2, MakeCell("c1", 1, 2), MakeRequests(2), MakeSteps(3)); });
  EXPECT_CONTAINS(error, "serve cell 'c1' is already stored (cell_id 1)");
  EXPECT_CONTAINS(error, path);
  EXPECT_EQ(store->CountRows("serve_cells"), 2);
  EXPECT_EQ(store->CountRows("serve_requests"), 4);
  EXPECT_EQ(store->CountRows("serve_steps"), 6);
  // A run that does not exist.
  EXPECT_CONTAINS(
      ErrorOf([&] { store->AddServeCell(99, MakeCell("c9", 1, 2), MakeRequests(2), {}); }),
      "run_id 99 does not exist");
  EXPECT_FALSE(store->HasServeCell("c9"));
}

TEST(ServeStore, RejectsInvalidRowsBeforeWritingAnything) {
  const std::string path = FreshDbPath("invalid");
  auto store = ResultsStore::Open(path);
  const int64_t run = store->BeginRun(MakeRun());
  auto add = [&](ServeCellRecord c, std::vector<ServeRequestRecord> r,
                 std::vector<ServeStepRecord> s) {
    return ErrorOf([&] { store->AddServeCell(run, c, r, s); });
  };
  EXPECT_CONTAINS(add(MakeCell("", 1, 2), MakeRequests(2), {}), "empty cell_key");
  ServeCellRecord bad_mode = MakeCell("m", 1, 2);
  bad_mode.mode = "burst";
  EXPECT_CONTAINS(add(bad_mode, MakeRequests(2), {}), "has mode 'burst'");
  EXPECT_CONTAINS(add(MakeCell("c0", 0, 2), MakeRequests(2), {}), "concurrency 0");
  ServeCellRecord no_rate = MakeCell("o", 0, 2);
  no_rate.mode = "open";
  EXPECT_CONTAINS(add(no_rate, MakeRequests(2), {}), "open-loop with rate 0");
  EXPECT_CONTAINS(add(MakeCell("n", 1, 3), MakeRequests(2), {}), "2 request rows but n_requests 3");
  std::vector<ServeRequestRecord> twice = MakeRequests(2);
  twice[1].request_index = 0;
  EXPECT_CONTAINS(add(MakeCell("t", 1, 2), twice, {}), "request_index 0 twice");
  std::vector<ServeRequestRecord> over = MakeRequests(2);
  over[1].n_accepted = over[1].n_drafted + 1;
  EXPECT_CONTAINS(add(MakeCell("a", 1, 2), over, {}), "request 1 has");
  std::vector<ServeRequestRecord> early = MakeRequests(2);
  early[0].first_token_ms = early[0].arrival_ms - 1;
  EXPECT_CONTAINS(add(MakeCell("e", 1, 2), early, {}), "arrival <= admitted <= first token");
  std::vector<ServeStepRecord> bad_step = MakeSteps(3);
  bad_step[2].n_accepted = bad_step[2].n_drafted + 1;
  EXPECT_CONTAINS(add(MakeCell("s", 1, 2), MakeRequests(2), bad_step), "step 2 has");
  std::vector<ServeStepRecord> dup_step = MakeSteps(3);
  dup_step[2].step_index = 1;
  EXPECT_CONTAINS(add(MakeCell("d", 1, 2), MakeRequests(2), dup_step),
                  "two steps with step_index 1");
  // Nothing of any refused cell was stored (the duplicate step rolled its cell back).
  EXPECT_EQ(store->CountRows("serve_cells"), 0);
  EXPECT_EQ(store->CountRows("serve_requests"), 0);
  EXPECT_EQ(store->CountRows("serve_steps"), 0);
}

TEST(ServeStore, StoredServeRowsAreAppendOnly) {
  const std::string path = FreshDbPath("append_only");
  ResultsStore::Open(path)->AddServeCell(ResultsStore::Open(path)->BeginRun(MakeRun()),
                                         MakeCell("k", 1, 2), MakeRequests(2), MakeSteps(2));
  for (const char* table : {"serve_cells", "serve_requests", "serve_steps"}) {
    SCOPED_TRACE(table);
    EXPECT_CONTAINS(RawExec(path, StrCat("UPDATE ", table, " SET cell_id = cell_id")),
                    "append-only");
    EXPECT_CONTAINS(RawExec(path, StrCat("DELETE FROM ", table)), "append-only");
  }
  EXPECT_EQ(ResultsStore::Open(path)->CountRows("serve_steps"), 2);
}

TEST(ServeStore, AVersion13FileOpensReadOnlyWithoutServeCellsAndGainsTheTablesWhenMigrated) {
  const std::string path = FreshDbPath("v13");
  CreateResultsDatabaseAtVersion(path, 13);
  StoreOptions read_only;
  read_only.read_only = true;
  {
    auto store = ResultsStore::Open(path, read_only);
    EXPECT_EQ(store->schema_version(), 13);
    EXPECT_TRUE(store->ServeCells().empty());
    EXPECT_FALSE(store->HasServeCell("k"));
    EXPECT_TRUE(store->ServeRequests(1).empty());
    EXPECT_TRUE(store->ServeSteps(1).empty());
  }
  {
    auto store = ResultsStore::Open(path);  // migrates to the current version
    EXPECT_EQ(store->schema_version(), kResultsSchemaVersion);
    EXPECT_EQ(store->CountRows("serve_cells"), 0);
    store->AddServeCell(store->BeginRun(MakeRun()), MakeCell("k", 1, 2), MakeRequests(2),
                        MakeSteps(2));
  }
  auto store = ResultsStore::Open(path, read_only);
  EXPECT_EQ(store->schema_version(), kResultsSchemaVersion);
  ASSERT_EQ(store->ServeCells().size(), 1u);
  EXPECT_EQ(Fields(store->ServeCells()[0].record), Fields(MakeCell("k", 1, 2)));
  // A read-only store refuses serve writes.
  EXPECT_CONTAINS(
      ErrorOf([&] { store->AddServeCell(1, MakeCell("k2", 1, 2), MakeRequests(2), {}); }),
      "opened read-only");
}

TEST(ServeStore, MergeCopiesServeCellsOnce) {
  const std::string in_path = FreshDbPath("merge_in");
  {
    auto in = ResultsStore::Open(in_path);
    const int64_t run = in->BeginRun(MakeRun());
    in->AddServeCell(run, MakeCell("m1", 1, 2), MakeRequests(2), MakeSteps(3));
    in->AddServeCell(run, MakeCell("m2", 2, 3), MakeRequests(3), MakeSteps(4));
  }
  auto out = ResultsStore::Open(FreshDbPath("merge_out"));
  const MergeSummary first = MergeResults(*out, in_path);
  EXPECT_EQ(first.serve_cells_copied, 2);
  EXPECT_EQ(first.runs_copied, 1);
  const MergeSummary again = MergeResults(*out, in_path);
  EXPECT_EQ(again.serve_cells_copied, 0);
  EXPECT_EQ(again.serve_cells_skipped, 2);
  ASSERT_EQ(out->ServeCells().size(), 2u);
  EXPECT_EQ(out->ServeSteps(out->ServeCells()[1].cell_id).size(), 4u);
  EXPECT_EQ(out->CountRows("serve_requests"), 5);
}

}  // namespace
}  // namespace specbed
