// Locale pinning (see locale_pin.h).
// Checked by: tests/reports/locale_test.cpp.
#include "base/locale_pin.h"

#include <clocale>
#include <locale>

namespace specbed {

std::string ChildLocaleShellPrefix() {
  return std::string("LC_ALL=") + kChildLocale + "; export LC_ALL; unset LANGUAGE; ";
}

void PinProcessLocale() {
  std::setlocale(LC_ALL, "C");
  std::locale::global(std::locale::classic());
}

}  // namespace specbed
