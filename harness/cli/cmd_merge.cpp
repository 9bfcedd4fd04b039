// `specbed merge OUT.db IN.db...`: copies the runs, cases, samples, steps and bench rows of each
// input (opened read-only) into OUT (created when missing), skipping cases whose case_key OUT
// already holds, so the shard databases of a sweep combine into one and merging twice adds
// nothing (results/merge.h). Every input is checked before OUT is touched.
// Checked by: tests/cli/sweep_cli_test.cpp and tests/results/merge_test.cpp.
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "base/error.h"
#include "harness/cli/commands.h"
#include "results/merge.h"
#include "results/store.h"

namespace specbed::cli {
namespace {

struct MergeOptions {
  std::string output;
  std::vector<std::string> inputs;
};

void RunMerge(const MergeOptions& o) {
  // A bad input (missing, not SQLite, not SpecBed, newer schema) fails before anything is written.
  StoreOptions read_only;
  read_only.read_only = true;
  for (const std::string& in : o.inputs) ResultsStore::Open(in, read_only);
  auto out = ResultsStore::Open(o.output);
  MergeSummary total;
  for (const std::string& in : o.inputs) {
    const MergeSummary s = MergeResults(*out, in);
    std::fprintf(stderr,
                 "specbed merge: %s: copied %lld cases (%lld samples, %lld steps), %lld runs, "
                 "%lld bench rows; skipped %lld cases already in %s\n",
                 in.c_str(), static_cast<long long>(s.cases_copied),
                 static_cast<long long>(s.samples_copied), static_cast<long long>(s.steps_copied),
                 static_cast<long long>(s.runs_copied), static_cast<long long>(s.bench_copied),
                 static_cast<long long>(s.cases_skipped), o.output.c_str());
    total.cases_copied += s.cases_copied;
    total.cases_skipped += s.cases_skipped;
  }
  std::fprintf(stderr, "specbed merge: %lld cases copied, %lld skipped -> %s (%lld cases)\n",
               static_cast<long long>(total.cases_copied),
               static_cast<long long>(total.cases_skipped), o.output.c_str(),
               static_cast<long long>(out->CountRows("cases")));
}

}  // namespace

void AddMergeCommand(CLI::App& app) {
  auto [cmd, o] = AddSubcommand(&app, "merge", RunMerge,
                                "Merge results databases (e.g. the shards of a sweep) into one; "
                                "cases already there are skipped");
  cmd->add_option("output", o->output, "Merged database (created when missing)")->required();
  cmd->add_option("inputs", o->inputs, "Databases to copy from (opened read-only)")
      ->required()
      ->expected(1, -1);
}

}  // namespace specbed::cli
