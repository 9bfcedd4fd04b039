// Helpers for the CLI tests that read what `specbed` wrote: a read-only results store, a row count
// that tolerates a database not created yet, a JSON config written into the test's folder, and a
// child killed with SIGKILL once it has stored some rows (but not all), and a run so killed
// mid-way. Header-only (tests only).
// Checked by: tests/cli/sweep_cli_test.cpp, tests/cli/cli_test.cpp
#pragma once

#include <gtest/gtest.h>
#include <signal.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "base/error.h"
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

// Runs `specbed args` in `dir` and kills it with SIGKILL once the results database `db` holds
// between 1 and `cases` - 1 cases; sets `*r` (when given) to the killed run. A fatal failure when
// the run ended before it could be killed mid-way.
inline void RunKilledMidway(const std::vector<std::string>& args, const std::string& dir,
                            const std::string& db, int64_t cases, ProcResult* r = nullptr) {
  Child child(args, dir);
  const int64_t at_kill = KillOnceStored(
      child, [&] { return CountRowsOrMinusOne(db, "cases"); }, cases);
  const ProcResult killed = child.Wait(60);
  if (r != nullptr) *r = killed;
  ASSERT_GE(at_kill, 1) << "`specbed " << args[0]
                        << "` finished before it could be killed mid-way; make it slower\n"
                        << Describe(killed);
  EXPECT_EQ(killed.term_signal, SIGKILL) << Describe(killed);
}

}  // namespace specbed::cli_test
