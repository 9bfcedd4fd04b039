// Helpers for the tests of `specbed report` (reports/report.h): report options that print no
// warnings and use a given gnuplot, whether a real gnuplot is installed, the images an index.html
// embeds and whether a file is a PNG. Header-only.
// Checked by: tests/reports/report_test.cpp
#pragma once

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <vector>

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

// Every <img src="..."> of the HTML, in order.
inline std::vector<std::string> ImageSources(const std::string& html) {
  std::vector<std::string> out;
  const std::regex img("<img src=\"([^\"]+)\"");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), img); it != std::sregex_iterator();
       ++it) {
    out.push_back((*it)[1]);
  }
  return out;
}

// Whether `path` is a PNG file (its signature) with more than the signature in it.
inline bool IsPngFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[8] = {};
  if (!in.read(head, 8)) return false;
  return std::string(head, 8) == std::string("\x89PNG\r\n\x1a\n", 8) &&
         std::filesystem::file_size(path) > 8;
}

}  // namespace specbed::testing
