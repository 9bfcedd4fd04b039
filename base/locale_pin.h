// Locale pinning: nothing SpecBed writes depends on the user's locale (LANG, LC_*, LANGUAGE).
// - SpecBed's own formatting (snprintf, iostreams and StrCat, std::to_string, strtod, nlohmann)
//   follows the process locale, never the environment's: SpecBed never calls setlocale(LC_ALL,
//   ""), and PinProcessLocale() (the first call of the specbed CLI) sets the C library's locale to
//   "C" and the C++ global locale to std::locale::classic(), whatever a linked library may have
//   set, so numbers read "1234.5" in every table, CSV, JSON and plot script.
// - Every child tool SpecBed runs (gnuplot for the report plots; in tests and scripts chromium
//   and sqlite3) runs with LC_ALL=C.UTF-8 and LANGUAGE unset: UTF-8 text (τ, ×, —) in and out,
//   untranslated messages (the report finds gnuplot's "warning:" lines), "." as the decimal point.
//   C.UTF-8 is built into glibc >= 2.35 (Debian 12), so it exists on every Debian system, also
//   one without the locales package.
// Checked by: tests/reports/locale_test.cpp.
#pragma once

#include <string>

namespace specbed {

// The locale of every child tool SpecBed runs.
inline constexpr const char* kChildLocale = "C.UTF-8";

// POSIX shell commands that pin kChildLocale for the commands after them in the same shell
// ("LC_ALL=C.UTF-8; export LC_ALL; unset LANGUAGE; "), to put before a child's command line.
std::string ChildLocaleShellPrefix();

// Sets the C library's locale (every category) to "C" and the C++ global locale to
// std::locale::classic(). Not thread-safe (setlocale): call it before starting threads.
void PinProcessLocale();

}  // namespace specbed
