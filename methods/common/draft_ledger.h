// Draft positions of a parallel draft/verify decoder (PEARL, SpecBranch), each counted once, for
// the rollback rates (results/README.md "Rollback rate"). A position is counted when it is first
// drafted (however many branches drafted a token there) and ends as exactly one of: accepted,
// rolled back (a target rejection or a branch point with no match discarded it), trimmed (the
// draft side discarded it itself: SpecBranch's posterior H-RAD, a chunk cut at the context limit)
// or pending (still awaiting verification when the answer stopped). A token carried into a later
// step (PEARL's next chunk, SpecBranch's branch-point token) stays pending and is not counted
// again. The rollback rate is (rolled back + trimmed) / drafted; the SpecBranch paper's variant
// leaves trimming out of the numerator.
// Checked by: tests/methods/draft_ledger_test.cpp (hand-made traces), the conservation checks in
// tests/methods/pearl_test.cpp and specbranch_test.cpp.
#pragma once

#include <cstdint>

#include "base/error.h"
#include "harness/engine/method.h"

namespace specbed {

class DraftLedger {
 public:
  // `n` positions drafted for the first time.
  void Drafted(int64_t n) { Add(n, step_drafted_, "drafted"); }
  // Pending positions that end accepted, rolled back or trimmed.
  void Accepted(int64_t n) { Settle(n, step_accepted_, "accepted"); }
  void RolledBack(int64_t n) { Settle(n, step_rolled_back_, "rolled back"); }
  void Trimmed(int64_t n) { Settle(n, step_trimmed_, "trimmed"); }
  // Drafted positions not settled yet; positions rolled back in the current step.
  int64_t pending() const { return pending_; }
  int64_t step_rolled_back() const { return step_rolled_back_; }
  // Writes this step's counts into `stats` (n_draft_generated, n_rolled_back, n_trimmed) and
  // starts the next step.
  void EndStep(StepStats& stats) {
    stats.n_draft_generated = step_drafted_;
    stats.n_rolled_back = step_rolled_back_;
    stats.n_trimmed = step_trimmed_;
    step_drafted_ = step_accepted_ = step_rolled_back_ = step_trimmed_ = 0;
  }
  void Reset() { *this = DraftLedger(); }

 private:
  void Add(int64_t n, int64_t& counter, const char* what) {
    SPECBED_CHECK(n >= 0, "draft ledger: ", n, " positions ", what);
    counter += n;
    pending_ += n;
  }
  void Settle(int64_t n, int64_t& counter, const char* what) {
    SPECBED_CHECK(n >= 0 && n <= pending_, "draft ledger: ", n, " positions ", what, " but only ",
                  pending_, " pending (a position counted twice?)");
    counter += n;
    pending_ -= n;
  }

  int64_t pending_ = 0;
  int64_t step_drafted_ = 0, step_accepted_ = 0, step_rolled_back_ = 0, step_trimmed_ = 0;
};

}  // namespace specbed
