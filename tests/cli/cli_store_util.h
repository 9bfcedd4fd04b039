// Helpers for the CLI tests that read what `specbed` wrote: a read-only results store, a row count
// that tolerates a database not created yet, a JSON config written into the test's folder, and a
// child killed with SIGKILL once it has stored some rows (but not all). Header-only (tests only).
// Checked by: tests/cli/sweep_cli_test.cpp
#pragma once

#include <signal.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "harness/base/error.h"
#include "results/store.h"
#include "tests/cli/cli_test_util.h"

namespace specbed::cli_test {

inline std::unique_ptr<ResultsStore> OpenReadOnly(const std::string& path) {
  StoreOptions options;
  options.read_only = true;
  return ResultsStore::Open(path, options);
}

// Number of rows of `table` in `db`, or -1 while it cannot be read (not created yet).
inline int64_t CountRowsOrMinusOne(const std::string& db, const std::string& table) {
  if (!std::filesystem::exists(db)) return -1;
  try {
    return OpenReadOnly(db)->CountRows(table);
  } catch (const Error&) {
    return -1;
  }
}

// Writes `json` (indented) to `dir`/`name` and returns the path.
inline std::string WriteJson(const std::string& dir, const std::string& name,
                             const nlohmann::json& json) {
  const std::string path = dir + "/" + name;
  WriteFile(path, json.dump(2));
  return path;
}

// Polls `stored` every `poll` until it returns a count in [1, `below`), then kills `child` with
// SIGKILL and returns that count; -1 when the child exits first or `timeout_s` passes.
inline int64_t KillOnceStored(Child& child, const std::function<int64_t()>& stored, int64_t below,
                              std::chrono::milliseconds poll = std::chrono::milliseconds(1),
                              double timeout_s = 120) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    const int64_t n = stored();
    if (n >= 1 && n < below) {
      child.Kill(SIGKILL);
      return n;
    }
    if (child.Exited()) break;
    std::this_thread::sleep_for(poll);
  }
  return -1;
}

}  // namespace specbed::cli_test
