// `specbed serve` end to end with the real binary on stories260K (6 requests, 8 new tokens):
// closed-loop cells store every request and batch step, the answers at C = 2 equal those at
// C = 1 request for request (the batch engine's identity through the whole serve path), times
// are ordered, the table and C* lines print; a rerun skips stored cells and runs only new ones;
// open-loop arrivals increase and requests wait for them; a batch-1-only method (pearl), an
// unknown key and a bad schedule are refused naming them, with no database left behind.
#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "results/store.h"
#include "tests/cli/cli_store_util.h"
#include "tests/cli/cli_test_util.h"

namespace specbed {
namespace {

using Json = nlohmann::json;
using namespace cli_test;

Json SmallServe(const std::string& db) {
  return {{"name", "serve-test"},
          {"output", db},
          {"targets", {"stories260K"}},
          {"dataset", {{"name", "stories"}, {"limit", 4}}},
          {"methods", {"ar", "sps", "ngram"}},
          {"concurrency", {1, 2}},
          {"n_requests", 6},
          {"max_new_tokens", 8},
          {"warmup", 0}};
}

// cell key -> (record, requests, steps)
struct Cell {
  ServeCellRecord record;
  std::vector<ServeRequestRecord> requests;
  std::vector<ServeStepRecord> steps;
};
std::vector<Cell> Cells(const std::string& db) {
  auto store = OpenReadOnly(db);
  std::vector<Cell> out;
  for (const auto& row : store->ServeCells()) {
    out.push_back({row.record, store->ServeRequests(row.cell_id), store->ServeSteps(row.cell_id)});
  }
  return out;
}

TEST(ServeCli, ClosedLoopCellsStoreEveryRequestAndStep) {
  const std::string dir = TestDir(), db = dir + "/serve.db";
  const std::string config = WriteJson(dir, "serve.json", SmallServe(db));
  const ProcResult r = RunSpecbed({"serve", config}, dir, 300);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  EXPECT_TRUE(ContainsAll(r.out, {"tok/s", "TPOT p50", "C* sps", "C* ngram"})) << r.out;
  const std::vector<Cell> cells = Cells(db);
  ASSERT_EQ(cells.size(), 6u);
  std::map<std::string, std::vector<std::string>> outputs;  // method|C -> output hashes
  for (const Cell& c : cells) {
    SCOPED_TRACE(c.record.method + " C=" + std::to_string(c.record.concurrency));
    ASSERT_EQ(c.requests.size(), 6u);
    for (const ServeRequestRecord& q : c.requests) {
      EXPECT_LE(q.arrival_ms, q.admitted_ms);
      EXPECT_LE(q.admitted_ms, q.first_token_ms);
      EXPECT_LE(q.first_token_ms, q.finish_ms);
      EXPECT_GT(q.n_output_tokens, 0);
      outputs[c.record.method + "|" + std::to_string(c.record.concurrency)].push_back(
          q.output_hash);
    }
    ASSERT_FALSE(c.steps.empty());
    int64_t most = 0;
    for (const ServeStepRecord& s : c.steps) most = std::max(most, s.batch_size);
    EXPECT_EQ(most, c.record.concurrency) << "the batch fills up to C";
    EXPECT_GT(c.record.makespan_ms, 0);
  }
  for (const char* m : {"ar", "sps", "ngram"}) {
    EXPECT_EQ(outputs[std::string(m) + "|1"], outputs[std::string(m) + "|2"]) << m;
  }
  EXPECT_EQ(outputs["ar|1"], outputs["sps|1"]) << "lossless at T = 0";
}

TEST(ServeCli, ARerunSkipsStoredCellsAndRunsOnlyNewOnes) {
  const std::string dir = TestDir(), db = dir + "/serve.db";
  Json j = SmallServe(db);
  j["methods"] = {"ar", "ngram"};
  const std::string config = WriteJson(dir, "serve.json", j);
  ASSERT_EQ(RunSpecbed({"serve", config}, dir, 300).exit_code, 0);
  const ProcResult again = RunSpecbed({"serve", config, "--concurrency", "1,2,4"}, dir, 300);
  ASSERT_EQ(again.exit_code, 0) << Describe(again);
  EXPECT_TRUE(Contains(again.err, "6 cells (2 run, 4 already complete)")) << again.err;
  EXPECT_EQ(Cells(db).size(), 6u);
}

TEST(ServeCli, OpenLoopRequestsWaitForTheirArrivals) {
  const std::string dir = TestDir(), db = dir + "/serve.db";
  Json j = SmallServe(db);
  j.erase("concurrency");
  j["methods"] = {"ar"};
  j["rates"] = {20};
  j["max_running"] = 2;
  const ProcResult r = RunSpecbed({"serve", WriteJson(dir, "serve.json", j)}, dir, 300);
  ASSERT_EQ(r.exit_code, 0) << Describe(r);
  const std::vector<Cell> cells = Cells(db);
  ASSERT_EQ(cells.size(), 1u);
  EXPECT_EQ(cells[0].record.mode, "open");
  double last = -1;
  for (const ServeRequestRecord& q : cells[0].requests) {
    EXPECT_GT(q.arrival_ms, last);
    EXPECT_GE(q.admitted_ms, q.arrival_ms);
    last = q.arrival_ms;
  }
  EXPECT_GT(last, 50.0) << "6 arrivals at 20/s span about 250 ms";
}

TEST(ServeCli, RefusesBatchOneMethodsAndBadConfigsLeavingNoDatabase) {
  const std::string dir = TestDir(), db = dir + "/serve.db";
  Json pearl = SmallServe(db);
  pearl["methods"] = {"ar", "pearl"};
  ProcResult r = RunSpecbed({"serve", WriteJson(dir, "pearl.json", pearl)}, dir);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Contains(r.err, "method pearl runs its own decode loop")) << r.err;
  Json unknown = SmallServe(db);
  unknown["concurency"] = {2};
  r = RunSpecbed({"serve", WriteJson(dir, "unknown.json", unknown)}, dir);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Contains(r.err, "unknown key \"concurency\"")) << r.err;
  Json schedule = SmallServe(db);
  schedule["schedules"] = {{{"policy", "by_batch"}, {"k_by_batch", {{"0", 2}}}}};
  r = RunSpecbed({"serve", WriteJson(dir, "schedule.json", schedule)}, dir);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(Contains(r.err, "k_by_batch key 0 must be a batch size >= 1")) << r.err;
  EXPECT_FALSE(std::filesystem::exists(db));
}

}  // namespace
}  // namespace specbed
