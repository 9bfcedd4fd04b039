// Published reference numbers for `specbed report`'s "paper vs measured" table: loads a JSON file
// {"paper", "table", "hardware", "notes", "rows": [{"method", "knobs", "target", "dataset",
// "temperature", "speedup", "tau"}]} (method, dataset, temperature and one of speedup/tau are
// required per row; unknown fields are an error naming the file and the field) and matches its
// rows against measured cases (method, dataset, temperature, target when given, knobs as a
// subset when given).
// Checked by: tests/reports/paper_report_test.cpp.
#pragma once

#include <string>
#include <vector>

#include "metrics/metrics.h"
#include "results/store.h"

namespace specbed {

struct PaperReference {
  struct Row {
    std::string method;
    std::string knobs_json = "{}";  // a JSON object; {} = any knobs
    std::string target;             // "" = any target
    std::string dataset;
    double temperature = 0;
    double speedup = kNoValue;  // NaN when the paper gives none
    double tau = kNoValue;
  };
  std::string path;  // the file it was loaded from
  std::string paper, table, hardware, notes;
  std::vector<Row> rows;
};

// Reads and validates a reference file. Fails (specbed::Error naming `path`, the row index and
// the field) on a missing/invalid file, an unknown field, a missing required field or a value of
// the wrong type.
PaperReference LoadPaperReference(const std::string& path);

// True when case `c` is a measurement of reference row `r`: same method, same dataset (the case's
// dataset name, or the file stem of a dataset path: "data/mt_bench.jsonl" matches "mt_bench"),
// the same temperature (within 1e-9), the same target when the row gives one, and every knob of
// the row present with an equal value in the case's method knobs.
bool MatchesPaperRow(const PaperReference::Row& r, const CaseRecord& c);

// Reference file paths named in a config JSON text: the "paper": {"reference": PATH} object
// (top level, or inside any nested object). Empty when there is none or the text is not JSON.
std::vector<std::string> PaperReferencePaths(const std::string& config_json);

}  // namespace specbed
