// `specbed export DB --format csv|json [--table cases|samples|steps]`: a results database as
// flat files for pandas / R / spreadsheets. `cases`: one row per case with every number of
// `specbed summary --json` (the same values: built from the same Summary), nested fields
// flattened to dotted columns (`speedup.geomean`, `speedup.geomean_ci.lo` / `.hi`,
// `exact_match.rate`, `acceptance.max_depth`); the fields that are objects or lists of varying
// shape (`knobs`, `method_traits`, `stop_reasons`, `acceptance.r`, `acceptance.alpha`,
// `acceptance.n_*`, `exact_match.divergences`) as JSON text in one column. `samples` / `steps`:
// the stored rows with their case_id and run_id. JSON = an array of objects (cases: the summary
// document itself). Checked by: tests/reports/export_test.cpp.
#pragma once

#include <string>

#include "reports/summary.h"

namespace specbed {

enum class ExportFormat { kCsv, kJson };
enum class ExportTable { kCases, kSamples, kSteps };

// "csv" / "json"; "cases" / "samples" / "steps". Anything else fails naming `flag` and the
// accepted values.
ExportFormat ParseExportFormat(const std::string& text, const std::string& flag);
ExportTable ParseExportTable(const std::string& text, const std::string& flag);

// The export of `table` (cases: the summary's rows and options; samples/steps: of the summary's
// selected cases) in `format`. CSV: RFC 4180 (a header row; cells with a comma, quote or line
// break quoted, quotes doubled; a missing or null value is an empty cell; numbers as in the JSON
// export, shortest round-trip form), "\n" line ends.
std::string ExportResults(const Summary& summary, ExportTable table, ExportFormat format);

}  // namespace specbed
