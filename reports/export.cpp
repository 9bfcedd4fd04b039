// `specbed export`: cases (the summary's numbers), samples, steps and serve cells as CSV or JSON
// (export.h).
// Checked by: tests/reports/export_test.cpp.
#include "reports/export.h"

#include <map>
#include <set>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/enum_names.h"
#include "base/error.h"
#include "base/names.h"
#include "reports/record_json.h"

namespace specbed {
namespace {

using Json = nlohmann::ordered_json;  // columns in the summary JSON's field order

// Fields kept as one JSON-text column (objects whose keys differ between cases).
bool KeepAsText(const std::string& path) {
  static const std::set<std::string> kText = {"knobs", "method_traits", "stop_reasons"};
  return kText.count(path) > 0;
}

// Lists left out of the cases CSV: per-position numbers (the `positions` table has them, one row
// per case and position) and the divergences (per answer; in the JSON export).
bool LeftOutOfCsv(const std::string& path) {
  return path == "exact_match.divergences" || path == "vllm.num_accepted_tokens_per_pos" ||
         path == "vllm.per_position_acceptance_rate" ||
         (path.rfind("acceptance.", 0) == 0 && path != "acceptance.max_depth");
}

// Flattens `j` into (column, value) pairs: objects recurse with dotted names, a two-element list
// under a name ending in "_ci" becomes NAME.lo / NAME.hi, other lists are JSON text.
void Flatten(const Json& j, const std::string& path,
             std::vector<std::pair<std::string, Json>>& out) {
  if (j.is_object() && !KeepAsText(path)) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      Flatten(*it, path.empty() ? it.key() : path + "." + it.key(), out);
    }
  } else if (j.is_array() && path.size() > 3 && path.compare(path.size() - 3, 3, "_ci") == 0 &&
             j.size() == 2) {
    out.emplace_back(path + ".lo", j[0]);
    out.emplace_back(path + ".hi", j[1]);
  } else if (LeftOutOfCsv(path)) {
    return;
  } else if ((j.is_array() || j.is_object())) {
    out.emplace_back(path, Json(j.dump()));
  } else {
    out.emplace_back(path, j);
  }
}

// Rows of flattened objects -> CSV with the union of the columns in first-seen order.
std::string Csv(const std::vector<Json>& rows) {
  std::vector<std::string> columns;
  std::set<std::string> seen;
  std::vector<std::vector<std::pair<std::string, Json>>> flat(rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    Flatten(rows[i], "", flat[i]);
    for (const auto& [name, value] : flat[i]) {
      if (seen.insert(name).second) columns.push_back(name);
    }
  }
  // A field that is null in some rows (an AR case's "speedup") and an object in others is
  // written only as the object's columns (empty cells where it is null).
  std::vector<std::string> kept;
  for (const std::string& c : columns) {
    bool prefix = false;
    for (const std::string& o : columns) prefix = prefix || o.rfind(c + ".", 0) == 0;
    if (!prefix) kept.push_back(c);
  }
  columns = std::move(kept);
  std::ostringstream s;
  for (size_t c = 0; c < columns.size(); ++c) s << (c ? "," : "") << CsvCell(Json(columns[c]));
  s << "\n";
  for (const auto& row : flat) {
    std::map<std::string, const Json*> by_name;
    for (const auto& [name, value] : row) by_name[name] = &value;
    for (size_t c = 0; c < columns.size(); ++c) {
      const auto it = by_name.find(columns[c]);
      s << (c ? "," : "") << (it == by_name.end() ? "" : CsvCell(*it->second));
    }
    s << "\n";
  }
  return s.str();
}

// A stored sample or step with its case_id and run_id (a step also with its prompt and turn),
// every field of its table as a key (reports/record_json.h).
Json SampleJson(const SummaryRow& r, const SampleRecord& s) {
  Json j = {{"case_id", r.row.case_id}, {"run_id", r.row.run_id}};
  AppendRecordJson(s, SampleFields(), j);
  return j;
}

Json StepJson(const SummaryRow& r, const StepRecord& s) {
  Json j = {{"case_id", r.row.case_id},
            {"run_id", r.row.run_id},
            {"prompt_id", s.prompt_id},
            {"turn", s.turn}};
  AppendRecordJson(s, StepFields(), j);
  return j;
}

// One row per (case, draft position): SpecBed's r_i and α_i, vLLM's per-position acceptance rate
// and the counts behind them.
std::vector<Json> PositionRows(const Json& cases) {
  std::vector<Json> rows;
  for (const Json& c : cases) {
    const Json& a = c["acceptance"];
    for (size_t i = 0; i < a["r"].size(); ++i) {
      rows.push_back({{"case_id", c["case_id"]},
                      {"run_id", c["run_id"]},
                      {"position", i + 1},
                      {"r", a["r"][i]},
                      {"alpha", a["alpha"][i]},
                      {"per_position_acceptance_rate", a["per_position_acceptance_rate"][i]},
                      {"n_reached", a["n_reached"][i]},
                      {"n_accepted", a["n_accepted"][i]},
                      {"n_conditional", a["n_conditional"][i]}});
    }
  }
  return rows;
}

// One row per `specbed serve` cell (the summary JSON's "serve"): its workload, every stored cell
// field and metric, and its series' C* with the interval (null for AR).
std::vector<Json> ServeRows(const Json& serve) {
  std::vector<Json> rows;
  for (const Json& group : serve) {
    std::map<std::string, const Json*> crossover;
    for (const Json& x : group["crossover"]) crossover[x["series"].get<std::string>()] = &x;
    for (const Json& cell : group["cells"]) {
      Json row = {{"workload", group["workload"]}};
      for (auto it = cell.begin(); it != cell.end(); ++it) row[it.key()] = *it;
      const auto x = crossover.find(cell["series"].get<std::string>());
      row["c_star"] = x == crossover.end() ? Json(nullptr) : (*x->second)["c_star"];
      row["c_star_ci"] =
          x == crossover.end() ? Json::array({nullptr, nullptr}) : (*x->second)["c_star_ci"];
      rows.push_back(std::move(row));
    }
  }
  return rows;
}

}  // namespace

namespace {
constexpr EnumName<ExportFormat> kExportFormatNames[] = {{ExportFormat::kCsv, "csv"},
                                                         {ExportFormat::kJson, "json"}};
constexpr EnumName<ExportTable> kExportTableNames[] = {{ExportTable::kCases, "cases"},
                                                       {ExportTable::kPositions, "positions"},
                                                       {ExportTable::kSamples, "samples"},
                                                       {ExportTable::kSteps, "steps"},
                                                       {ExportTable::kServe, "serve"}};
}  // namespace

ExportFormat ParseExportFormat(const std::string& text, const std::string& flag) {
  if (const std::optional<ExportFormat> format = EnumValueOf(kExportFormatNames, text)) {
    return *format;
  }
  Fail(flag, ": unknown export format '", text, "' (expected csv or json)");
}

ExportTable ParseExportTable(const std::string& text, const std::string& flag) {
  if (const std::optional<ExportTable> table = EnumValueOf(kExportTableNames, text)) return *table;
  Fail(flag, ": unknown table '", text, "' (expected cases, positions, samples, steps or serve)");
}

std::string ExportResults(const Summary& summary, ExportTable table, ExportFormat format) {
  const Json doc = Json::parse(SummaryJson(summary));
  if (table == ExportTable::kCases) {
    if (format == ExportFormat::kJson) return doc.dump(2) + "\n";
    std::vector<Json> rows(doc["cases"].begin(), doc["cases"].end());
    return Csv(rows);
  }
  if (table == ExportTable::kPositions || table == ExportTable::kServe) {
    const std::vector<Json> rows =
        table == ExportTable::kPositions ? PositionRows(doc["cases"]) : ServeRows(doc["serve"]);
    return format == ExportFormat::kJson ? Json(rows).dump(2) + "\n" : Csv(rows);
  }
  std::vector<Json> rows;
  if (!summary.rows.empty()) {
    StoreOptions options;
    options.read_only = true;
    auto store = ResultsStore::Open(summary.db_path, options);
    for (const SummaryRow& r : summary.rows) {
      if (table == ExportTable::kSamples) {
        for (const SampleRecord& s : store->LoadSamples(r.row.case_id))
          rows.push_back(SampleJson(r, s));
      } else {
        for (const StepRecord& s : store->LoadSteps(r.row.case_id)) rows.push_back(StepJson(r, s));
      }
    }
  }
  if (format == ExportFormat::kJson) return Json(rows).dump(2) + "\n";
  return Csv(rows);
}

}  // namespace specbed
