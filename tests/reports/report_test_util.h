// Helpers for the tests of `specbed report` (reports/report.h): report options that print no
// warnings and use a given gnuplot, and whether a real gnuplot is installed. Header-only.
// Checked by: tests/reports/report_test.cpp
#pragma once

#include <string>

#include "reports/plots.h"
#include "reports/report.h"

namespace specbed::testing {

// Options of a report that runs `gnuplot` (a path, a program name, or one that does not exist for
// tables only) and leaves the warnings to the result instead of printing them.
inline ReportOptions QuietReportOptions(const std::string& gnuplot) {
  ReportOptions o;
  o.gnuplot = gnuplot;
  o.print_warnings = false;
  return o;
}

inline bool HasGnuplot() {
  return !FindExecutable("gnuplot").empty();
}

}  // namespace specbed::testing
