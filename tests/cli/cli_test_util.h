// Helpers for the end-to-end CLI tests: run the real `specbed` binary (SPECBED_BIN) as a child
// process from the repository root with SPECBED_HOME set, stdout/stderr captured in files, exit
// status / signal / timeout recorded; a per-test scratch directory. Header-only (tests only).
// Checked by: tests/cli/sweep_cli_test.cpp (which uses every helper).
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

extern char** environ;

namespace specbed::cli_test {

// Passes when `haystack` contains `needle`; on failure shows both.
inline ::testing::AssertionResult Contains(const std::string& haystack, const std::string& needle) {
  if (haystack.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected to find \"" << needle << "\" in:\n"
                                       << haystack.substr(0, 4000);
}

// Passes when `haystack` contains every one of `needles`; on failure names the missing ones.
inline ::testing::AssertionResult ContainsAll(const std::string& haystack,
                                              const std::vector<std::string>& needles) {
  std::string missing;
  for (const std::string& needle : needles) {
    if (haystack.find(needle) == std::string::npos) missing += "\n  \"" + needle + "\"";
  }
  if (missing.empty()) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "expected to find" << missing << "\nin:\n"
                                       << haystack.substr(0, 4000);
}

struct ProcResult {
  int exit_code = -1;   // valid when the child exited normally
  int term_signal = 0;  // != 0 when it was killed by a signal
  bool timed_out = false;
  std::string out, err;  // captured stdout / stderr
  double wall_s = 0;
};

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  ASSERT_TRUE(out.good()) << "cannot write " << path;
}

// A running `specbed` process whose stdout/stderr go to files under `dir` (files, not pipes, so a
// chatty child never blocks on a full pipe while the test polls the database).
class Child {
 public:
  Child(const std::vector<std::string>& args, const std::string& dir) {
    static int counter = 0;
    const std::string stem = dir + "/proc" + std::to_string(counter++);
    out_path_ = stem + ".stdout";
    err_path_ = stem + ".stderr";
    // Everything the child needs is built before fork(): after it only async-signal-safe calls.
    std::vector<std::string> argv_s = {SPECBED_BIN};
    argv_s.insert(argv_s.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : argv_s) argv.push_back(a.data());
    argv.push_back(nullptr);
    std::vector<std::string> env_s;
    for (char** e = environ; *e != nullptr; ++e) {
      if (std::strncmp(*e, "SPECBED_HOME=", 13) != 0) env_s.emplace_back(*e);
    }
    env_s.push_back(std::string("SPECBED_HOME=") + SPECBED_SOURCE_DIR);
    std::vector<char*> envp;
    for (auto& e : env_s) envp.push_back(e.data());
    envp.push_back(nullptr);
    const int out_fd = open(out_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    const int err_fd = open(err_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (out_fd < 0 || err_fd < 0) {
      ADD_FAILURE() << "cannot create output files under " << dir;
      if (out_fd >= 0) close(out_fd);
      if (err_fd >= 0) close(err_fd);
      return;
    }
    start_ = std::chrono::steady_clock::now();
    pid_ = fork();
    if (pid_ == 0) {
      // Users run specbed from the repository root (relative shipped paths resolve from there).
      if (chdir(SPECBED_SOURCE_DIR) != 0) _exit(126);
      const int devnull = open("/dev/null", O_RDONLY);
      if (devnull >= 0) dup2(devnull, 0);
      dup2(out_fd, 1);
      dup2(err_fd, 2);
      execve(argv[0], argv.data(), envp.data());
      _exit(127);
    }
    close(out_fd);
    close(err_fd);
    if (pid_ < 0) ADD_FAILURE() << "fork failed: " << std::strerror(errno);
  }
  ~Child() {
    if (pid_ > 0 && !reaped_) {
      kill(pid_, SIGKILL);
      int status = 0;
      waitpid(pid_, &status, 0);
    }
  }
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;

  pid_t pid() const { return pid_; }

  // True once the child has exited (and was reaped).
  bool Exited() {
    if (pid_ <= 0 || reaped_) return true;
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) Reap(status);
    return reaped_;
  }

  void Kill(int sig) {
    if (pid_ > 0 && !reaped_) kill(pid_, sig);
  }

  // Waits up to timeout_s (then SIGKILLs the child) and collects its output.
  ProcResult Wait(double timeout_s) {
    const auto deadline = start_ + std::chrono::duration<double>(timeout_s);
    while (!Exited()) {
      if (std::chrono::steady_clock::now() > deadline) {
        result_.timed_out = true;
        kill(pid_, SIGKILL);
        int status = 0;
        waitpid(pid_, &status, 0);
        Reap(status);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    result_.out = ReadAll(out_path_);
    result_.err = ReadAll(err_path_);
    return result_;
  }

 private:
  void Reap(int status) {
    reaped_ = true;
    result_.wall_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    if (WIFEXITED(status)) result_.exit_code = WEXITSTATUS(status);
    if (WIFSIGNALED(status)) result_.term_signal = WTERMSIG(status);
  }

  pid_t pid_ = -1;
  bool reaped_ = false;
  std::string out_path_, err_path_;
  std::chrono::steady_clock::time_point start_;
  ProcResult result_;
};

// Printable summary of a finished child for assertion messages.
inline std::string Describe(const ProcResult& r) {
  std::ostringstream s;
  s << "exit=" << r.exit_code << " signal=" << r.term_signal << " timed_out=" << r.timed_out
    << " wall=" << r.wall_s << "s\n--- stdout ---\n"
    << r.out.substr(0, 4000) << "\n--- stderr ---\n"
    << r.err.substr(0, 4000);
  return s.str();
}

// Per-test scratch directory, removed and recreated at the start of each test.
inline std::string TestDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::filesystem::path dir = std::filesystem::path(SPECBED_TEST_TMPDIR) / "cli" /
                                    (std::string(info->test_suite_name()) + "." + info->name());
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  std::filesystem::create_directories(dir);
  return dir.string();
}

inline ProcResult RunSpecbed(const std::vector<std::string>& args, const std::string& dir,
                             double timeout_s = 60) {
  Child child(args, dir);
  return child.Wait(timeout_s);
}

// RunSpecbed with the arguments given as one space-separated string (no quoting: for arguments
// without spaces).
inline ProcResult RunSpecbedLine(const std::string& args, const std::string& dir,
                                 double timeout_s = 120) {
  std::vector<std::string> argv;
  std::istringstream in(args);
  for (std::string a; in >> a;) argv.push_back(a);
  return RunSpecbed(argv, dir, timeout_s);
}

}  // namespace specbed::cli_test
