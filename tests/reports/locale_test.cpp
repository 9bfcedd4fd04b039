// Tests that nothing `specbed report`, `summary` and `export` write depends on the user's locale
// (base/locale_pin.h): gnuplot runs with LC_ALL=C.UTF-8 and LANGUAGE unset whatever the
// test process's environment says (a fake gnuplot reports its locale); the real gnuplot, started
// from a C-locale environment (LC_ALL=C, as on a fresh Debian without LANG), gives no warning on
// every figure of the paper database (`set encoding utf8` warns "iconv failed to convert degree
// sign" in the C locale) and writes τ as UTF-8; and PinProcessLocale() undoes a hostile process
// locale (a C++ global locale with a decimal comma and digit grouping, and the C library's
// de_DE.UTF-8 where localedef can build it), after which report.md, tables.tex, the summary table
// and the CSV export are byte for byte those of the "C" locale.
#include <gtest/gtest.h>

#include <clocale>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <locale>
#include <map>
#include <optional>
#include <regex>
#include <string>

#include "base/error.h"
#include "base/locale_pin.h"
#include "base/mapped_file.h"
#include "reports/export.h"
#include "reports/format.h"
#include "reports/plots.h"
#include "reports/report.h"
#include "reports/summary.h"
#include "tests/common/test_util.h"
#include "tests/reports/report_test_util.h"
#include "tests/reports/synthetic_db.h"

namespace specbed {
namespace {

namespace fs = std::filesystem;
using testing::FreshDbPath;
using testing::QuietReportOptions;
using testing::WritePaperDb;

// Sets (or, with nullopt, unsets) environment variables for its lifetime; restores them after.
class ScopedEnvironment {
 public:
  explicit ScopedEnvironment(const std::map<std::string, std::optional<std::string>>& values) {
    for (const auto& [name, value] : values) {
      const char* old = std::getenv(name.c_str());
      saved_[name] = old ? std::optional<std::string>(old) : std::nullopt;
      Set(name, value);
    }
  }
  ~ScopedEnvironment() {
    for (const auto& [name, value] : saved_) Set(name, value);
  }
  ScopedEnvironment(const ScopedEnvironment&) = delete;
  ScopedEnvironment& operator=(const ScopedEnvironment&) = delete;

 private:
  static void Set(const std::string& name, const std::optional<std::string>& value) {
    if (value) {
      setenv(name.c_str(), value->c_str(), 1);
    } else {
      unsetenv(name.c_str());
    }
  }
  std::map<std::string, std::optional<std::string>> saved_;
};

// The environment of a fresh Debian without LANG (the C locale), plus a LANGUAGE that would
// translate messages where a tool has translations.
std::map<std::string, std::optional<std::string>> CLocaleEnvironment() {
  return {{"LC_ALL", "C"},          {"LANG", std::nullopt},       {"LANGUAGE", "de:fr"},
          {"LC_CTYPE", "C"},        {"LC_NUMERIC", std::nullopt}, {"LC_MESSAGES", std::nullopt},
          {"LOCPATH", std::nullopt}};
}

std::string FreshDir(const std::string& name) {
  return testing::ScratchDir("locale_" + name);
}

TEST(Locale, ChildToolsRunInTheCUtf8Locale) {
  EXPECT_EQ(std::string(kChildLocale), "C.UTF-8");
  EXPECT_EQ(ChildLocaleShellPrefix(), "LC_ALL=C.UTF-8; export LC_ALL; unset LANGUAGE; ");
  // A fake gnuplot that reports its locale as a warning line (the report turns it into a report
  // warning, so the test reads it back from the result).
  const std::string wrapper = std::string(SPECBED_TEST_TMPDIR) + "/gnuplot_locale.sh";
  {
    std::ofstream w(wrapper);
    w << "#!/bin/sh\n"
      << "cat > /dev/null\n"
      << "echo \"warning: LC_ALL=[$LC_ALL] LANGUAGE=[${LANGUAGE-unset}]"
         " charmap=[$(locale charmap 2>/dev/null)]\" >&2\n";
  }
  fs::permissions(wrapper, fs::perms::owner_all);
  const std::string db = FreshDbPath("locale_child");
  WritePaperDb(db);
  const ScopedEnvironment c_locale(CLocaleEnvironment());
  const ReportResult r = WriteReport(db, FreshDir("child"), QuietReportOptions(wrapper));
  std::vector<std::string> locale_lines;
  for (const std::string& w : r.warnings) {
    if (w.find("LC_ALL=[") != std::string::npos) locale_lines.push_back(w);
  }
  ASSERT_EQ(locale_lines.size(), 1u) << r.warnings.size() << " warnings";
  EXPECT_CONTAINS(locale_lines[0], "LC_ALL=[C.UTF-8] LANGUAGE=[unset] charmap=[UTF-8]");
}

TEST(Locale, CLocaleEnvironmentGivesNoGnuplotWarnings) {
  if (FindExecutable("gnuplot").empty()) GTEST_SKIP() << "gnuplot is not installed (gnuplot-nox)";
  const std::string db = FreshDbPath("locale_gnuplot");
  WritePaperDb(db);
  const std::string dir = FreshDir("gnuplot");
  const ScopedEnvironment c_locale(CLocaleEnvironment());
  const ReportResult r = WriteReport(db, dir, QuietReportOptions("gnuplot"));
  // Every figure of the paper database (headline, budget, phase-time, τ vs. temperature, ...),
  // each of which says `set encoding utf8`: not one warning.
  EXPECT_GE(r.images.size(), 10u);
  EXPECT_TRUE(r.warnings.empty()) << r.warnings.size() << " warnings, the first: " << r.warnings[0];
  EXPECT_FALSE(fs::exists(dir + "/gnuplot.log")) << ReadFileToString(dir + "/gnuplot.log");
  // UTF-8 text reaches the SVGs as UTF-8.
  EXPECT_CONTAINS(ReadFileToString(dir + "/tau_vs_budget_1.svg"), "τ vs. draft budget");
}

// A C++ locale with a decimal comma and "." grouping of thousands (as de_DE's numbers read).
class CommaDecimal : public std::numpunct<char> {
 protected:
  char do_decimal_point() const override { return ','; }
  char do_thousands_sep() const override { return '.'; }
  std::string do_grouping() const override { return "\3"; }
};

// de_DE.UTF-8 for the C library, built with localedef into the test scratch dir (LOCPATH) when
// the system does not have it; "" where neither works (no locales package: the C++ half of the
// hostile locale is still tested).
std::string GermanCLocale() {
  if (std::setlocale(LC_ALL, "de_DE.UTF-8") != nullptr) return "de_DE.UTF-8";
  const std::string dir = std::string(SPECBED_TEST_TMPDIR) + "/locales";
  if (!fs::exists(dir + "/de_DE.UTF-8/LC_NUMERIC")) {
    fs::create_directories(dir);
    const std::string command =
        "localedef -i de_DE -f UTF-8 '" + dir + "/de_DE.UTF-8' > /dev/null 2>&1";
    if (std::system(command.c_str()) != 0) return "";
  }
  setenv("LOCPATH", dir.c_str(), 1);
  const bool ok = std::setlocale(LC_ALL, "de_DE.UTF-8") != nullptr;
  unsetenv("LOCPATH");
  return ok ? "de_DE.UTF-8" : "";
}

// Everything the report, summary and export write for the paper database, generation times cut.
std::string AllOutputs(const std::string& db, const std::string& dir) {
  const ReportResult r = WriteReport(db, dir, QuietReportOptions("/nonexistent/gnuplot"));
  const Summary summary = BuildSummary(db);
  const std::regex time("\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\dZ");
  return std::regex_replace(ReadFileToString(r.report_md) + ReadFileToString(r.tables_tex) +
                                FormatSummaryTable(summary) +
                                ExportResults(summary, ExportTable::kCases, ExportFormat::kCsv) +
                                ExportResults(summary, ExportTable::kSteps, ExportFormat::kCsv),
                            time, "TIME");
}

TEST(Locale, PinProcessLocaleUndoesAHostileLocale) {
  const std::string db = FreshDbPath("locale_pin");
  WritePaperDb(db);
  PinProcessLocale();
  const std::string classic = AllOutputs(db, FreshDir("pin_classic"));

  // A hostile process locale, as a linked library calling setlocale(LC_ALL, "") in a German
  // environment, or std::locale::global(std::locale("")), would leave it.
  std::locale::global(std::locale(std::locale::classic(), new CommaDecimal));
  const std::string c_locale = GermanCLocale();
  EXPECT_EQ(StrCat(1234.5), "1.234,5");  // the hostile locale bites: StrCat is an ostream
  if (!c_locale.empty()) {
    EXPECT_EQ(report_format::Fixed(1234.5, 1), "1234,5");  // and snprintf
  } else {
    std::printf("no de_DE.UTF-8 (localedef could not build it): C++ global locale only\n");
  }
  const std::string hostile = AllOutputs(db, FreshDir("pin_hostile"));
  EXPECT_NE(hostile, classic) << "the hostile locale changed nothing: the test tests nothing";

  PinProcessLocale();
  EXPECT_EQ(std::string(std::setlocale(LC_ALL, nullptr)), "C");
  EXPECT_EQ(std::locale().name(), "C");
  EXPECT_EQ(StrCat(1234.5), "1234.5");
  EXPECT_EQ(report_format::Fixed(1234.5, 1), "1234.5");
  EXPECT_EQ(AllOutputs(db, FreshDir("pin_pinned")), classic);
}

}  // namespace
}  // namespace specbed
