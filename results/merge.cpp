// Merging results databases (see merge.h).
#include "results/merge.h"

#include <filesystem>
#include <map>
#include <memory>
#include <vector>

#include "base/error.h"

namespace specbed {
namespace {

// Every provenance field of a run, joined with a separator that no field contains.
std::string RunIdentity(const RunInfo& r) {
  const char sep = '\x1f';
  return r.started_at + sep + r.specbed_version + sep + r.git_commit + sep + r.build_flags + sep +
         r.host + sep + r.cpu + sep + r.gpu + sep + r.library_versions_json + sep + r.config_json +
         sep + r.repro_command;
}

}  // namespace

MergeSummary MergeResults(ResultsStore& out, const std::string& input_path) {
  std::error_code ec;
  SPECBED_CHECK(!std::filesystem::equivalent(out.path(), input_path, ec), "cannot merge '",
                input_path, "' into itself");
  StoreOptions options;
  options.read_only = true;
  std::unique_ptr<ResultsStore> in = ResultsStore::Open(input_path, options);

  // Runs of the output by provenance, so a run merged before is reused.
  std::map<std::string, int64_t> out_runs;
  for (const auto& r : out.ListRuns()) out_runs.emplace(RunIdentity(r.info), r.run_id);

  MergeSummary summary;
  const std::vector<ResultsStore::CaseRow> cases = in->ListCases();
  const std::vector<ResultsStore::ServeCellRow> serve_cells = in->ServeCells();
  for (const auto& run : in->ListRuns()) {
    const std::string identity = RunIdentity(run.info);
    const auto existing = out_runs.find(identity);
    int64_t out_run_id = existing == out_runs.end() ? -1 : existing->second;
    auto out_run = [&]() {
      if (out_run_id < 0) {
        out_run_id = out.BeginRun(run.info);
        out_runs.emplace(identity, out_run_id);
        ++summary.runs_copied;
      }
      return out_run_id;
    };
    for (const auto& c : cases) {
      if (c.run_id != run.run_id) continue;
      if (out.HasCompletedCase(c.record.case_key)) {
        ++summary.cases_skipped;
        continue;
      }
      const std::vector<SampleRecord> samples = in->LoadSamples(c.case_id);
      const std::vector<StepRecord> steps = in->LoadSteps(c.case_id);
      out.WriteCase(out_run(), c.record, samples, steps);
      ++summary.cases_copied;
      summary.samples_copied += static_cast<int64_t>(samples.size());
      summary.steps_copied += static_cast<int64_t>(steps.size());
    }
    for (const auto& cell : serve_cells) {
      if (cell.run_id != run.run_id) continue;
      if (out.HasServeCell(cell.record.cell_key)) {
        ++summary.serve_cells_skipped;
        continue;
      }
      out.AddServeCell(out_run(), cell.record, in->ServeRequests(cell.cell_id),
                       in->ServeSteps(cell.cell_id));
      ++summary.serve_cells_copied;
    }
    // Bench rows have no key: copy them only with a run that is new to the output.
    if (existing == out_runs.end()) {
      const std::vector<BenchRecord> bench = in->LoadBench(run.run_id);
      if (!bench.empty()) {
        out.WriteBench(out_run(), bench);
        summary.bench_copied += static_cast<int64_t>(bench.size());
      }
      const std::vector<BenchVerifyRecord> verify = in->LoadBenchVerify(run.run_id);
      if (!verify.empty()) out.WriteBenchVerify(out_run(), verify);
      const std::vector<BenchBandwidthRecord> bandwidth = in->LoadBenchBandwidth(run.run_id);
      if (!bandwidth.empty()) out.WriteBenchBandwidth(out_run(), bandwidth);
    }
  }
  return summary;
}

}  // namespace specbed
