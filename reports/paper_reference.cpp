// Loading and matching paper reference files (see paper_reference.h).
// Checked by: tests/reports/paper_report_test.cpp.
#include "reports/paper_reference.h"

#include <cmath>
#include <set>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json_read.h"
#include "base/mapped_file.h"
#include "base/names.h"

namespace specbed {
namespace {

using Json = nlohmann::json;

std::string RequireString(const Json& j, const std::string& where, const char* field) {
  SPECBED_CHECK(j.is_string(), where, ": field '", field, "' must be a string, got ", j.dump());
  return j.get<std::string>();
}

double RequireNumber(const Json& j, const std::string& where, const char* field) {
  SPECBED_CHECK(j.is_number(), where, ": field '", field, "' must be a number, got ", j.dump());
  return j.get<double>();
}

// "data/shift/mt_bench.jsonl" -> "mt_bench"; "mt_bench" -> "mt_bench".
std::string DatasetStem(const std::string& dataset) {
  std::string s = dataset;
  const size_t slash = s.find_last_of('/');
  if (slash != std::string::npos) s = s.substr(slash + 1);
  const size_t dot = s.find_last_of('.');
  if (dot != std::string::npos && dot > 0) s = s.substr(0, dot);
  return s;
}

void CollectReferences(const Json& j, std::vector<std::string>* out) {
  if (j.is_object()) {
    for (auto it = j.begin(); it != j.end(); ++it) {
      if (it.key() == "paper" && it->is_object() && it->contains("reference") &&
          (*it)["reference"].is_string()) {
        out->push_back((*it)["reference"].get<std::string>());
      } else {
        CollectReferences(*it, out);
      }
    }
  } else if (j.is_array()) {
    for (const Json& e : j) CollectReferences(e, out);
  }
}

}  // namespace

PaperReference LoadPaperReference(const std::string& path) {
  const Json j = ReadJsonFile(path);
  SPECBED_CHECK(j.is_object(), "paper reference '", path, "': expected a JSON object");
  PaperReference ref;
  ref.path = path;
  const std::set<std::string> top_fields = {"paper", "table", "hardware", "notes", "rows"};
  for (auto it = j.begin(); it != j.end(); ++it) {
    SPECBED_CHECK(top_fields.count(it.key()), "paper reference '", path, "': unknown field '",
                  it.key(), "' (known: paper, table, hardware, notes, rows)");
  }
  const std::string where = "paper reference '" + path + "'";
  if (j.contains("paper")) ref.paper = RequireString(j["paper"], where, "paper");
  if (j.contains("table")) ref.table = RequireString(j["table"], where, "table");
  if (j.contains("hardware")) ref.hardware = RequireString(j["hardware"], where, "hardware");
  if (j.contains("notes")) ref.notes = RequireString(j["notes"], where, "notes");
  SPECBED_CHECK(j.contains("rows") && j["rows"].is_array(), where,
                ": field 'rows' must be an array of rows");
  const std::set<std::string> row_fields = {"method",      "knobs",   "target", "dataset",
                                            "temperature", "speedup", "tau"};
  for (size_t i = 0; i < j["rows"].size(); ++i) {
    const Json& r = j["rows"][i];
    const std::string rw = StrCat(where, " rows[", i, "]");
    SPECBED_CHECK(r.is_object(), rw, ": expected an object");
    for (auto it = r.begin(); it != r.end(); ++it) {
      SPECBED_CHECK(row_fields.count(it.key()), rw, ": unknown field '", it.key(),
                    "' (known: method, knobs, target, dataset, temperature, speedup, tau)");
    }
    for (const char* required : {"method", "dataset", "temperature"}) {
      SPECBED_CHECK(r.contains(required), rw, ": missing required field '", required, "'");
    }
    SPECBED_CHECK(r.contains("speedup") || r.contains("tau"), rw,
                  ": needs at least one of the fields 'speedup' and 'tau'");
    PaperReference::Row row;
    row.method = RequireString(r["method"], rw, "method");
    row.dataset = RequireString(r["dataset"], rw, "dataset");
    row.temperature = RequireNumber(r["temperature"], rw, "temperature");
    if (r.contains("target")) row.target = RequireString(r["target"], rw, "target");
    if (r.contains("speedup")) row.speedup = RequireNumber(r["speedup"], rw, "speedup");
    if (r.contains("tau")) row.tau = RequireNumber(r["tau"], rw, "tau");
    if (r.contains("knobs")) {
      SPECBED_CHECK(r["knobs"].is_object(), rw, ": field 'knobs' must be an object, got ",
                    r["knobs"].dump());
      row.knobs_json = r["knobs"].dump();
    }
    ref.rows.push_back(std::move(row));
  }
  return ref;
}

bool MatchesPaperRow(const PaperReference::Row& r, const CaseRecord& c) {
  if (r.method != c.method) return false;
  if (r.dataset != c.dataset && r.dataset != DatasetStem(c.dataset)) return false;
  if (std::fabs(r.temperature - c.temperature) > 1e-9) return false;
  if (!r.target.empty() && r.target != c.target) return false;
  const Json want = Json::parse(r.knobs_json, nullptr, false);
  if (want.is_object() && !want.empty()) {
    const Json have = Json::parse(c.method_knobs_json, nullptr, false);
    if (!have.is_object()) return false;
    for (auto it = want.begin(); it != want.end(); ++it) {
      if (!have.contains(it.key())) return false;
      const Json& v = have[it.key()];
      if (v.is_number() && it->is_number()) {
        if (v.get<double>() != it->get<double>()) return false;
      } else if (v != *it) {
        return false;
      }
    }
  }
  return true;
}

std::vector<std::string> PaperReferencePaths(const std::string& config_json) {
  std::vector<std::string> out;
  const Json j = Json::parse(config_json, nullptr, false);
  if (!j.is_discarded()) CollectReferences(j, &out);
  return out;
}

}  // namespace specbed
