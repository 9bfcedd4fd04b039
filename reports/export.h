// `specbed export DB --format csv|json [--table cases|positions|samples|steps|serve]`: a results
// database as flat files for pandas / R / spreadsheets. `cases`: one row per case with every
// number of `specbed summary --json` (the same values: built from the same Summary), in that
// document's field order (identity, configuration, throughput, τ / T_D / rollback, vLLM's
// acceptance_rate and mean_acceptance_length, acceptance.max_depth, speedup, exact match; the
// order is listed in reports/README.md), nested fields flattened to dotted columns
// (`speedup.geomean`, `speedup.geomean_ci.lo` / `.hi`, `exact_match.rate`); `knobs`,
// `method_traits` and `stop_reasons` as JSON text; no lists in cells: the per-position numbers
// are the `positions` table (case_id, run_id, position, r, alpha, per_position_acceptance_rate,
// n_reached, n_accepted, n_conditional) and the divergences are in the JSON export. `samples` /
// `steps`: the stored rows with their case_id and run_id. `serve`: one row per `specbed serve`
// cell (its workload, every stored cell field, the serve metrics with TTFT / TPOT / ITL / E2E
// percentiles as dotted columns, ×AR, and its method's C* with `c_star_ci.lo` / `.hi`). JSON = an
// array of objects (cases: the summary document itself). Checked by: tests/reports/export_test.cpp.
#pragma once

#include <string>

#include "reports/summary.h"

namespace specbed {

enum class ExportFormat { kCsv, kJson };
enum class ExportTable { kCases, kPositions, kSamples, kSteps, kServe };

// "csv" / "json"; "cases" / "positions" / "samples" / "steps" / "serve". Anything else fails naming
// `flag` and the accepted values.
ExportFormat ParseExportFormat(const std::string& text, const std::string& flag);
ExportTable ParseExportTable(const std::string& text, const std::string& flag);

// The export of `table` (cases: the summary's rows and options; samples/steps: of the summary's
// selected cases) in `format`. CSV: RFC 4180 (a header row; cells with a comma, quote or line
// break quoted, quotes doubled; a missing or null value is an empty cell; numbers as in the JSON
// export, shortest round-trip form), "\n" line ends.
std::string ExportResults(const Summary& summary, ExportTable table, ExportFormat format);

// One CSV cell of a JSON value, the rule above (shared with `bench --format csv`): null = empty,
// strings as they are, booleans true / false, numbers in their shortest round-trip form; quoted
// (quotes doubled) when it holds a comma, quote or line break.
template <typename JsonValue>
std::string CsvCell(const JsonValue& v) {
  std::string text;
  if (v.is_null()) return "";
  if (v.is_string()) {
    text = v.template get<std::string>();
  } else if (v.is_boolean()) {
    text = v.template get<bool>() ? "true" : "false";
  } else {
    text = v.dump();
  }
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string quoted = "\"";
  for (char c : text) quoted += (c == '"') ? std::string("\"\"") : std::string(1, c);
  return quoted + "\"";
}

}  // namespace specbed
