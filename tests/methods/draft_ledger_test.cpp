// The rollback counter of the parallel decoders (methods/common/draft_ledger.h) on hand-made
// traces of PEARL and SpecBranch steps: each drafted position counted once (a branch-point token
// carried into the next step is not counted again), trimming counted as waste beside the
// SpecBranch paper's variant without it, and a position settled twice refused. The metrics read
// the same steps back into both rates (metrics/metrics.h).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/error.h"
#include "methods/common/draft_ledger.h"
#include "metrics/metrics.h"

namespace specbed {
namespace {

struct Counts {
  int64_t generated, rolled_back, trimmed;
};

Counts End(DraftLedger& ledger, std::vector<StepStats>& trace) {
  StepStats s;
  ledger.EndStep(s);
  trace.push_back(s);
  return {s.n_draft_generated, s.n_rolled_back, s.n_trimmed};
}

void ExpectCounts(const Counts& c, int64_t generated, int64_t rolled_back, int64_t trimmed) {
  EXPECT_EQ(c.generated, generated);
  EXPECT_EQ(c.rolled_back, rolled_back);
  EXPECT_EQ(c.trimmed, trimmed);
}

CaseMetrics MetricsOf(const std::vector<StepStats>& trace) {
  std::vector<StepRecord> rows;
  for (const StepStats& s : trace) {
    StepRecord r;
    r.n_rolled_back = s.n_rolled_back;
    r.n_draft_generated = s.n_draft_generated;
    r.n_trimmed = s.n_trimmed;
    rows.push_back(r);
  }
  return ComputeCaseMetrics({}, rows);
}

TEST(DraftLedger, PearlRejectionDiscardsTheRestOfRAndTheConcurrentChunk) {
  DraftLedger ledger;
  std::vector<StepStats> trace;
  // Step 1: R empty; the next chunk (4) is drafted during verification; its first is accepted.
  ledger.Drafted(4);
  ledger.Accepted(1);
  ExpectCounts(End(ledger, trace), 4, 0, 0);
  EXPECT_EQ(ledger.pending(), 3);
  // Step 2: R = those 3 (not counted again), 2 accepted; the chunk drafted meanwhile (4) assumed
  // R[2]: R[2] and the whole chunk are rolled back.
  ledger.Drafted(4);
  ledger.Accepted(2);
  ledger.RolledBack(1 + 4);
  ExpectCounts(End(ledger, trace), 4, 5, 0);
  EXPECT_EQ(ledger.pending(), 0);
  const CaseMetrics m = MetricsOf(trace);
  EXPECT_DOUBLE_EQ(m.draft_waste_rate, 5.0 / 8.0);
  EXPECT_DOUBLE_EQ(m.spec_rollback_rate, 5.0 / 8.0);  // no trimming: both definitions agree
}

TEST(DraftLedger, SpecBranchCountsTheBranchPointOnceAndTrimmingAsWaste) {
  DraftLedger ledger;
  std::vector<StepStats> trace;
  // Step 1, draft stage: a chunk of 5; its unconfident last token is the branch point's first
  // candidate, so R = 4 and the branch point is already counted. Branches draft 3 tokens after
  // the candidate: 1 + 3 positions after R, 3 of them new (however many branches ran).
  ledger.Drafted(5);
  ledger.Drafted(1 + 3 - 1);
  ledger.Accepted(4);  // R accepted
  ledger.Accepted(1);  // a candidate matched
  // Posterior H-RAD keeps 1 token, the next token becomes the next branch point's candidate
  // (pending), the last one is trimmed.
  ledger.Trimmed(3 - 1 - 1);
  ExpectCounts(End(ledger, trace), 8, 0, 1);
  EXPECT_EQ(ledger.pending(), 2);
  // Step 2: R = the kept token, the branch point carried over (not counted again) + 3 new
  // positions; R is rejected: R and every position after it roll back.
  ledger.Drafted(3);
  ledger.Accepted(0);
  ledger.RolledBack(1 + 1 + 3);
  ExpectCounts(End(ledger, trace), 3, 5, 0);
  EXPECT_EQ(ledger.pending(), 0);
  // 11 positions = 5 accepted + 5 rolled back + 1 trimmed (counting the carried branch point
  // again would make 13 drafted positions for the same work).
  const CaseMetrics m = MetricsOf(trace);
  EXPECT_EQ(m.draft_generated, 11);
  EXPECT_EQ(m.rolled_back + m.trimmed, 6);
  EXPECT_DOUBLE_EQ(m.draft_waste_rate, 6.0 / 11.0);    // the rollback rate: trimming is waste
  EXPECT_DOUBLE_EQ(m.spec_rollback_rate, 5.0 / 11.0);  // the paper's variant: trimming left out
}

TEST(DraftLedger, NoMatchAtTheBranchPointRollsBackEveryBranchPosition) {
  DraftLedger ledger;
  std::vector<StepStats> trace;
  ledger.Drafted(3);  // R = 3 (no branch point token drawn: the chain ended confident)
  ledger.Drafted(1 + 2);
  ledger.Accepted(3);
  ledger.RolledBack(1 + 2);  // no candidate matched the target
  ExpectCounts(End(ledger, trace), 6, 3, 0);
  EXPECT_DOUBLE_EQ(MetricsOf(trace).draft_waste_rate, 0.5);
}

TEST(DraftLedger, RefusesAPositionSettledTwice) {
  DraftLedger ledger;
  ledger.Drafted(2);
  ledger.Accepted(2);
  EXPECT_THROW(ledger.RolledBack(1), Error);
  EXPECT_THROW(ledger.Drafted(-1), Error);
}

TEST(DraftLedger, OlderRowsWithoutTrimmingGiveNoWasteRate) {
  // Rows written before schema v10 recorded rollbacks but not trimming: the waste rate is not
  // guessed, the paper's variant still reads.
  std::vector<StepRecord> rows(2);
  rows[0].n_rolled_back = 2;
  rows[0].n_draft_generated = 4;
  rows[1].n_rolled_back = 0;
  rows[1].n_draft_generated = 4;
  const CaseMetrics m = ComputeCaseMetrics({}, rows);
  EXPECT_TRUE(std::isnan(m.draft_waste_rate));
  EXPECT_DOUBLE_EQ(m.spec_rollback_rate, 0.25);
}

}  // namespace
}  // namespace specbed
