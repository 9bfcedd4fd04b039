// `specbed bench --format md|csv|json`: how the measured rows are written to stdout. Markdown
// (the default) prints the build line, then each row as it is measured, then the verify-width
// table at the end; csv prints one RFC 4180 table of the rows (columns = the bench table's, in its
// order) and, after a blank line, the verify rows' table; json prints one document
// {"build", "rows", "verify"} at the end. With csv / json every other line (the BLAS / GEMV /
// sync-cost / bandwidth notes and the build line) goes to stderr, so stdout is the data alone.
// Checked by: tests/cli/cli_test.cpp (CliBench.PromptRowsFormatsAndBuildLine).
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "results/store.h"

namespace specbed::cli {

enum class BenchFormat { kMarkdown, kCsv, kJson };
// "md" | "csv" | "json"; anything else fails naming --format.
BenchFormat ParseBenchFormat(const std::string& text);

// A row's llama-bench test name: "pp64" (prompt processing of 64 tokens) or "tg256" (256 decode
// steps); rows stored before schema v13 (test '') are decode rows.
std::string BenchTestName(const BenchRecord& row);

class BenchPrinter {
 public:
  explicit BenchPrinter(BenchFormat format) : format_(format) {}
  // Where the lines around the table go: stdout for Markdown, stderr for csv / json.
  FILE* notes() const { return format_ == BenchFormat::kMarkdown ? stdout : stderr; }
  // "build: specbed ... (commit ...; LibTorch ...)" (json: its "build" key too).
  void Build(const std::string& build_line);
  // One measured row (Markdown: printed now, the table header before the first).
  void Row(const BenchRecord& row);
  // Verify-width rows, kept for Finish.
  void VerifyRows(const std::vector<BenchVerifyRecord>& rows);
  // Markdown: the verify-width table; csv / json: the whole document.
  void Finish();

 private:
  BenchFormat format_;
  std::string build_;
  bool header_printed_ = false;
  std::vector<BenchRecord> rows_;
  std::vector<BenchVerifyRecord> verify_;
};

}  // namespace specbed::cli
