// The report's output on a fixed database against committed golden files: the guard for
// refactors of reports/ (issue 28: "reports render the same tables"). The database is a real one,
// the 8B-twin run of the third H100 session (tests/reports/golden/twin8b.db, a copy of
// results/gpu/2026-11-27-h100-call4-twin8b.db: five methods, T = 0 and T = 1, paired timing,
// steps). report.md, tables.tex and plots.gp must equal tests/reports/golden/ byte for byte once
// the two things that depend on the moment are normalized (the "generated <time>" stamp and the
// database path). Plots are off (no gnuplot), so no gnuplot version enters the output.
// After an intended change of the output: SPECBED_UPDATE_GOLDEN=1 reports_test
// --gtest_filter=ReportGolden.* rewrites the golden files; review their diff before committing.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <regex>
#include <string>

#include "base/mapped_file.h"
#include "reports/report.h"

namespace specbed {
namespace {

namespace fs = std::filesystem;

const std::string kGolden = std::string(SPECBED_SOURCE_DIR) + "/tests/reports/golden";

// The moment-dependent parts replaced by fixed words.
std::string Normalized(std::string text, const std::string& db_path) {
  for (size_t at = text.find(db_path); at != std::string::npos; at = text.find(db_path, at)) {
    text.replace(at, db_path.size(), "DB");
  }
  return std::regex_replace(text, std::regex("generated [0-9T:Z-]+"), "generated TIME");
}

TEST(ReportGolden, MarkdownLatexAndPlotDataEqualTheGoldenFiles) {
  const std::string dir = std::string(SPECBED_TEST_TMPDIR) + "/report_golden";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string db = dir + "/twin8b.db";  // a copy: opening may touch the file
  fs::copy_file(kGolden + "/twin8b.db", db);
  ReportOptions options;
  options.gnuplot = "/nonexistent/gnuplot";
  options.print_warnings = false;
  WriteReport(db, dir + "/report", options);
  const bool update = std::getenv("SPECBED_UPDATE_GOLDEN") != nullptr;
  for (const char* file : {"report.md", "tables.tex", "plots.gp"}) {
    const std::string got = Normalized(ReadFileToString(dir + "/report/" + file), db);
    if (update) {
      WriteFileAtomically(kGolden + "/" + file, got);
      continue;
    }
    EXPECT_EQ(got, ReadFileToString(kGolden + "/" + file))
        << file << " differs from tests/reports/golden/" << file
        << " (rewrite with SPECBED_UPDATE_GOLDEN=1 after an intended change)";
  }
}

}  // namespace
}  // namespace specbed
