// `specbed bench` output formats (bench_output.h): Markdown rows as measured, or one CSV / JSON
// document at the end built from the bench tables' field lists (results/record_schema.h), so a
// new stored field reaches every format.
// Checked by: tests/cli/cli_test.cpp (CliBench.PromptRowsFormatsAndBuildLine).
#include "harness/cli/bench_output.h"

#include <sstream>

#include "base/error.h"
#include "reports/export.h"
#include "reports/record_json.h"

namespace specbed::cli {
namespace {

using OrderedJson = nlohmann::ordered_json;

std::string OrNone(const std::string& s) {
  return s.empty() ? "-" : s;
}

void PrintMarkdownRow(const BenchRecord& row) {
  const bool decode = BenchTestName(row).rfind("tg", 0) == 0;
  char roofline[32] = "-", huge[32] = "-";
  if (decode && row.roofline_fraction == row.roofline_fraction)
    std::snprintf(roofline, sizeof(roofline), "%.2f", row.roofline_fraction);
  if (row.huge_page_bytes >= 0)
    std::snprintf(huge, sizeof(huge), "%.1f", row.huge_page_bytes * 1e-6);
  std::printf(
      "| %s | %s | %d | %lld | %s | %lld | %lld | %.1f | %.1f | %.4f | %.4f | %.4f | %.2f | %.1f | "
      "%s | %s | %s |\n",
      row.model.c_str(), row.dtype.c_str(), static_cast<int>(row.threads),
      static_cast<long long>(row.batch_size), BenchTestName(row).c_str(),
      static_cast<long long>(row.context_len), static_cast<long long>(row.n_tokens),
      row.tokens_per_s, row.tokens_per_s_std, row.ms_per_step, row.forward_ms_per_step,
      row.other_ms_per_step, 100.0 * row.other_ms_per_step / row.ms_per_step,
      row.weight_bytes * 1e-6, roofline, OrNone(row.gemv_kernel).c_str(), huge);
}

template <typename R>
OrderedJson RecordsJson(const std::vector<R>& records, const std::vector<Field<R>>& fields) {
  OrderedJson out = OrderedJson::array();
  for (const R& r : records) {
    OrderedJson j = OrderedJson::object();
    AppendRecordJson(r, fields, j);
    out.push_back(std::move(j));
  }
  return out;
}

// One CSV table: a header of the field names, then one line per record.
template <typename R>
std::string RecordsCsv(const std::vector<R>& records, const std::vector<Field<R>>& fields) {
  std::ostringstream s;
  for (size_t c = 0; c < fields.size(); ++c) s << (c ? "," : "") << fields[c].name;
  s << "\n";
  for (const R& r : records) {
    for (size_t c = 0; c < fields.size(); ++c) {
      s << (c ? "," : "") << CsvCell(FieldJson(r, fields[c]));
    }
    s << "\n";
  }
  return s.str();
}

}  // namespace

BenchFormat ParseBenchFormat(const std::string& text) {
  if (text == "md") return BenchFormat::kMarkdown;
  if (text == "csv") return BenchFormat::kCsv;
  if (text == "json") return BenchFormat::kJson;
  Fail("bench --format: unknown format '", text, "' (expected md, csv or json)");
}

std::string BenchTestName(const BenchRecord& row) {
  return (row.test == "pp" ? "pp" : "tg") + std::to_string(row.n_tokens);
}

void BenchPrinter::Build(const std::string& build_line) {
  build_ = build_line;
  std::fprintf(notes(), "build: %s\n", build_line.c_str());
}

void BenchPrinter::Row(const BenchRecord& row) {
  if (format_ != BenchFormat::kMarkdown) {
    rows_.push_back(row);
    return;
  }
  if (!header_printed_) {
    std::printf(
        "\n| model | dtype | threads | batch | test | context | tokens | tok/s | ± | ms/step | "
        "forward ms | other ms | other %% | weight MB | roofline | GEMV | huge-page MB |\n");
    std::printf(
        "|---|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|\n");
    header_printed_ = true;
  }
  PrintMarkdownRow(row);
  std::fflush(stdout);
}

void BenchPrinter::VerifyRows(const std::vector<BenchVerifyRecord>& rows) {
  verify_.insert(verify_.end(), rows.begin(), rows.end());
}

void BenchPrinter::Finish() {
  if (format_ == BenchFormat::kCsv) {
    std::string out = RecordsCsv(rows_, BenchFields());
    if (!verify_.empty()) out += "\n" + RecordsCsv(verify_, BenchVerifyFields());
    std::fputs(out.c_str(), stdout);
  } else if (format_ == BenchFormat::kJson) {
    const OrderedJson doc = {{"build", build_},
                             {"rows", RecordsJson(rows_, BenchFields())},
                             {"verify", RecordsJson(verify_, BenchVerifyFields())}};
    std::printf("%s\n", doc.dump(2).c_str());
  } else if (!verify_.empty()) {
    std::printf(
        "\n| verify width | model | dtype | threads | context | n | forward ms (median) | × n=1 "
        "|\n");
    std::printf("|---|---|---|---:|---:|---:|---:|---:|\n");
    for (const BenchVerifyRecord& v : verify_) {
      std::printf("| verify | %s | %s | %lld | %lld | %lld | %.4f | %.2f |\n", v.model.c_str(),
                  v.dtype.c_str(), static_cast<long long>(v.threads),
                  static_cast<long long>(v.context_len), static_cast<long long>(v.n_query),
                  v.forward_ms, v.ratio_to_one);
    }
  }
  std::fflush(stdout);
}

}  // namespace specbed::cli
