// Two bench databases side by side (bench_compare.h).
// Checked by: tests/reports/bench_compare_test.cpp.
#include "reports/bench_compare.h"

#include <cstdio>
#include <map>
#include <sstream>

#include "base/error.h"
#include "base/names.h"

namespace specbed {
namespace {

StoreOptions ReadOnly() {
  StoreOptions options;
  options.read_only = true;
  return options;
}

// What a row measured: model, dtype, threads, batch, test, context.
std::string KeyOf(const BenchRecord& r) {
  return StrCat(r.model, " ", r.dtype, " t=", r.threads, " b=", r.batch_size, " ",
                r.test == "pp" ? "pp" : "tg", r.n_tokens, " ctx=", r.context_len);
}

// The rows of a database by key, the latest (highest run, then row) winning, and the keys in
// first-seen order.
std::map<std::string, BenchRecord> LatestRows(const std::string& path,
                                              std::vector<std::string>* order) {
  std::map<std::string, BenchRecord> by_key;
  for (const BenchRecord& r : ResultsStore::Open(path, ReadOnly())->LoadBench()) {
    const std::string key = KeyOf(r);
    if (!by_key.count(key)) order->push_back(key);
    by_key[key] = r;  // LoadBench returns rows in run, then row order
  }
  return by_key;
}

}  // namespace

bool IsBenchDatabase(const std::string& path) {
  auto store = ResultsStore::Open(path, ReadOnly());
  return store->CountRows("cases") == 0 && store->CountRows("bench") > 0;
}

BenchComparison CompareBenchDatabases(const std::string& a_path, const std::string& b_path) {
  BenchComparison c{a_path, b_path, {}, {}, {}};
  std::vector<std::string> a_order, b_order;
  const auto a = LatestRows(a_path, &a_order);
  const auto b = LatestRows(b_path, &b_order);
  for (const std::string& key : a_order) {
    const auto it = b.find(key);
    if (it == b.end()) {
      c.only_a.push_back(key);
    } else {
      c.rows.push_back({a.at(key), it->second});
    }
  }
  for (const std::string& key : b_order) {
    if (!a.count(key)) c.only_b.push_back(key);
  }
  SPECBED_CHECK(!c.rows.empty(), "compare: no bench row of '", a_path, "' matches one of '", b_path,
                "' (rows match on model, dtype, threads, batch, test and context)");
  return c;
}

std::string FormatBenchComparison(const BenchComparison& c) {
  std::ostringstream s;
  s << "specbed compare: bench rows of A = " << c.a_path << " and B = " << c.b_path << "\n\n";
  s << "| model | dtype | threads | batch | test | context | A tok/s | B tok/s | B/A |\n";
  s << "|---|---|---:|---:|---|---:|---:|---:|---:|\n";
  char line[512];
  for (const BenchComparisonRow& r : c.rows) {
    std::snprintf(line, sizeof(line),
                  "| %s | %s | %lld | %lld | %s%lld | %lld | %.1f | %.1f | %.3f |\n",
                  r.a.model.c_str(), r.a.dtype.c_str(), static_cast<long long>(r.a.threads),
                  static_cast<long long>(r.a.batch_size), r.a.test == "pp" ? "pp" : "tg",
                  static_cast<long long>(r.a.n_tokens), static_cast<long long>(r.a.context_len),
                  r.a.tokens_per_s, r.b.tokens_per_s, r.ratio());
    s << line;
  }
  s << "\nB/A = B's tok/s / A's (> 1: B faster); one measurement each (its ± is in the bench "
       "tables), so read small differences as noise.\n";
  if (!c.only_a.empty()) s << "only in A: " << Join(c.only_a, "; ") << "\n";
  if (!c.only_b.empty()) s << "only in B: " << Join(c.only_b, "; ") << "\n";
  return s.str();
}

}  // namespace specbed
