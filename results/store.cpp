// The SpecBed results store on SQLite: schema creation/versioning/migration, WAL setup, the
// append-only write path (one transaction per case, reused prepared statements) and the read side.
// Checked by: tests/results/store_test.cpp.
#include "results/store.h"

#include <fcntl.h>
#include <sqlite3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <type_traits>
#include <utility>

#include "base/error.h"
#include "base/mapped_file.h"
#include "base/names.h"
#include "base/timer.h"
#include "results/record_schema.h"
#include "results/schema_sql.h"
#include "results/sql_rows.h"

namespace specbed {

using namespace sql_rows;  // NOLINT(build/namespaces): the store's own helpers

namespace {

constexpr const char* kFormatName = "specbed_results";

const std::vector<std::string> kTables = {
    "runs",         "cases",           "samples",        "steps",      "bench",
    "bench_verify", "bench_bandwidth", "meta",           "train_runs", "train_log",
    "train_eval",   "serve_cells",     "serve_requests", "serve_steps"};
const std::vector<std::string> kDtypes = {"float32", "bfloat16", "float16"};
const std::vector<std::string> kDevices = {"cpu", "cuda", "cuda:N"};
const std::vector<std::string> kStopReasons = {"eos", "max_new_tokens", "stop_string",
                                               "max_context"};

bool Contains(const std::vector<std::string>& values, const std::string& v) {
  for (const auto& x : values)
    if (x == v) return true;
  return false;
}

std::string DirName(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

// Whether this process may create files in `dir` (effective ids, as open() checks).
bool DirWritable(const std::string& dir) {
  return faccessat(AT_FDCWD, dir.c_str(), W_OK | X_OK, AT_EACCESS) == 0;
}

// Why a database file could not be opened/created, in words.
std::string DescribeOpenFailure(const std::string& path, sqlite3* db) {
  struct stat st {};
  if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) return "it is a directory";
  const std::string dir = DirName(path);
  if (stat(dir.c_str(), &st) != 0) {
    if (errno == ENOTDIR) return "a parent of '" + dir + "' is not a directory";
    return "directory '" + dir + "' does not exist";
  }
  if (!S_ISDIR(st.st_mode)) return "'" + dir + "' is not a directory";
  if (stat(path.c_str(), &st) != 0 && !DirWritable(dir)) {
    return "folder '" + dir + "' is not writable (permission denied creating the file in it)";
  }
  std::string reason = db ? sqlite3_errmsg(db) : "out of memory";
  const int sys_errno = db ? sqlite3_system_errno(db) : 0;
  if (sys_errno != 0) reason += StrCat(" (", std::strerror(sys_errno), ")");
  return reason;
}

}  // namespace

void CreateResultsDatabaseAtVersion(const std::string& path, int version) {
  SPECBED_CHECK(version >= 1 && version <= kResultsSchemaVersion, "results database '", path,
                "': cannot create schema version ", version, " (1..", kResultsSchemaVersion, ")");
  sqlite3* db = nullptr;
  const int rc =
      sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr);
  std::string sql = kSchemaV1;
  for (int v = 1; v < version; ++v) sql += MigrationSql(v);
  sql += StrCat("INSERT INTO meta(key, value) VALUES ('format', '", kFormatName,
                "'), ('schema_version', '", version, "'); PRAGMA user_version = ", version, ";");
  char* error = nullptr;
  const int exec_rc =
      rc == SQLITE_OK ? sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error) : rc;
  const std::string message = error ? error : (db ? sqlite3_errmsg(db) : "out of memory");
  sqlite3_free(error);
  sqlite3_close(db);
  SPECBED_CHECK(exec_rc == SQLITE_OK, "results database '", path, "': creating schema version ",
                version, " failed: ", message);
}

std::string SqliteLibraryVersion() {
  return sqlite3_libversion();
}

ResultsStore::ResultsStore(const std::string& path, const StoreOptions& options)
    : path_(path), options_(options) {}

ResultsStore::~ResultsStore() {
  for (sqlite3_stmt* s :
       {insert_run_, insert_case_, insert_sample_, insert_step_, find_case_, find_run_}) {
    sqlite3_finalize(s);
  }
  if (db_ != nullptr) {
    if (sqlite3_get_autocommit(db_) == 0) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    sqlite3_close_v2(db_);
  }
}

std::unique_ptr<ResultsStore> ResultsStore::Open(const std::string& path,
                                                 const StoreOptions& options) {
  SPECBED_CHECK(!path.empty(), "results database path is empty");
  SPECBED_CHECK(options.busy_timeout_ms >= 0, "results database '", path,
                "': busy_timeout_ms must be >= 0, got ", options.busy_timeout_ms);
  std::unique_ptr<ResultsStore> store(new ResultsStore(path, options));
  store->Init();
  return store;
}

[[noreturn]] void ResultsStore::FailSqlite(int rc, const std::string& op) const {
  const int primary = rc & 0xff;
  const std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  if (primary == SQLITE_BUSY || primary == SQLITE_LOCKED) {
    const int64_t waited_ms = (NowMicros() - op_start_us_) / 1000;
    Fail("results database '", path_, "' is locked by another process (waited ", waited_ms,
         " ms); another specbed run may be writing to it: wait for it to finish, write to a "
         "different results file, or raise the busy timeout (while ",
         op, ")");
  }
  if (primary == SQLITE_NOTADB) {
    Fail("'", path_, "' is not a SQLite database (", msg,
         "); pass a SpecBed results database or a path for a new one");
  }
  if (primary == SQLITE_READONLY) {
    // SQLite writes a journal next to the database: a writable file in a read-only folder fails
    // here too, and the fix is the folder's permissions, not the file's.
    const std::string dir = DirName(path_);
    if (rc == SQLITE_READONLY_DIRECTORY || !DirWritable(dir)) {
      Fail("results database '", path_, "' cannot be written: its folder '", dir,
           "' is not writable, and SQLite must create a journal file next to the database (", msg,
           ") while ", op, "; make the folder writable or write the results elsewhere");
    }
    Fail("results database '", path_, "' is not writable (", msg, ") while ", op);
  }
  std::string detail = msg;
  if (primary == SQLITE_IOERR || primary == SQLITE_CANTOPEN || primary == SQLITE_FULL) {
    const int sys_errno = db_ ? sqlite3_system_errno(db_) : 0;
    if (sys_errno != 0) detail += StrCat(" (", std::strerror(sys_errno), ")");
  }
  Fail("results database '", path_, "': ", op, " failed: ", detail);
}

void ResultsStore::Exec(const char* sql, const std::string& op) const {
  const int rc = sqlite3_exec(db_, sql, nullptr, nullptr, nullptr);
  if (rc != SQLITE_OK) FailSqlite(rc, op);
}

sqlite3_stmt* ResultsStore::Prepare(const char* sql) const {
  sqlite3_stmt* stmt = nullptr;
  const int rc = sqlite3_prepare_v3(db_, sql, -1, SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) {
    sqlite3_finalize(stmt);
    FailSqlite(rc, StrCat("preparing '", sql, "'"));
  }
  return stmt;
}

sqlite3_stmt* ResultsStore::Cached(sqlite3_stmt** slot, const char* sql) const {
  if (*slot == nullptr) *slot = Prepare(sql);
  return *slot;
}

namespace {

// True when the schema of an open database can be read (false e.g. for a WAL database whose
// -shm file cannot be created).
bool CanReadSchema(sqlite3* db) {
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db, "SELECT count(*) FROM sqlite_schema", -1, &raw, nullptr) !=
      SQLITE_OK) {
    sqlite3_finalize(raw);
    return false;
  }
  const int rc = sqlite3_step(raw);
  sqlite3_finalize(raw);
  return rc == SQLITE_ROW;
}

// "file:/path%3Fwith%23odd?immutable=1": a URI for `path` (percent-encoding what URIs reserve).
std::string ImmutableUri(const std::string& path) {
  std::string uri = "file:";
  for (unsigned char c : path) {
    if (c == '%' || c == '?' || c == '#' || c < 0x20 || c >= 0x7f) {
      char buf[4];
      std::snprintf(buf, sizeof(buf), "%%%02X", c);
      uri += buf;
    } else {
      uri += static_cast<char>(c);
    }
  }
  return uri + "?immutable=1";
}

// A WAL database on a read-only medium (or where its -shm file cannot be created): SQLite needs
// the -shm file even to read. Closes `db` and reopens `path` immutable (no locks, no -shm), which
// reads the main file as it is; un-checkpointed -wal content is not seen (specbed checkpoints on
// close, so a finished run has none).
sqlite3* ReopenImmutable(sqlite3* db, const std::string& path) {
  sqlite3_close_v2(db);
  sqlite3* reopened = nullptr;
  if (sqlite3_open_v2(ImmutableUri(path).c_str(), &reopened, SQLITE_OPEN_READONLY | SQLITE_OPEN_URI,
                      nullptr) != SQLITE_OK) {
    const std::string reason = DescribeOpenFailure(path, reopened);
    sqlite3_close_v2(reopened);
    Fail("cannot open results database '", path, "' read-only: ", reason);
  }
  return reopened;
}

// sqlite3_step, retried every 10 ms while SQLite answers BUSY / LOCKED without calling the busy
// handler (the switch to WAL mode takes an exclusive lock that way) until `deadline_us`.
int StepRetryingWhileBusy(sqlite3_stmt* stmt, int64_t deadline_us) {
  int rc = sqlite3_step(stmt);
  while (((rc & 0xff) == SQLITE_BUSY || (rc & 0xff) == SQLITE_LOCKED) &&
         NowMicros() < deadline_us) {
    sqlite3_reset(stmt);
    sqlite3_sleep(10);
    rc = sqlite3_step(stmt);
  }
  return rc;
}

// The meta table's format name into `format` ("" when the file has no meta table); SQLITE_OK or
// the failing result code.
int ReadFormatName(sqlite3* db, std::string* format) {
  sqlite3_stmt* raw = nullptr;
  const int prc =
      sqlite3_prepare_v2(db, "SELECT value FROM meta WHERE key = 'format'", -1, &raw, nullptr);
  OwnedStmt s(raw);
  format->clear();
  if (prc != SQLITE_OK) return (prc & 0xff) == SQLITE_ERROR ? SQLITE_OK : prc;  // ERROR: no table
  const int step_rc = sqlite3_step(s.get());
  if (step_rc == SQLITE_ROW) *format = ColText(s.get(), 0);
  return step_rc == SQLITE_ROW || step_rc == SQLITE_DONE ? SQLITE_OK : step_rc;
}

}  // namespace

void ResultsStore::Init() {
  op_start_us_ = NowMicros();
  struct stat st {};
  const bool existed = stat(path_.c_str(), &st) == 0;
  if (options_.read_only) {
    SPECBED_CHECK(existed, "results database '", path_, "' does not exist");
  }
  if (existed && !S_ISREG(st.st_mode)) CheckPathKind(path_, PathKind::kFile, "results database");
  const int flags =
      options_.read_only ? SQLITE_OPEN_READONLY : (SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  const int rc = sqlite3_open_v2(path_.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    const std::string reason = DescribeOpenFailure(path_, db_);
    Fail(existed ? "cannot open" : "cannot create", " results database '", path_, "': ", reason);
  }
  if (options_.read_only && !CanReadSchema(db_)) db_ = ReopenImmutable(db_, path_);
  if (!options_.read_only && sqlite3_db_readonly(db_, "main") == 1) {
    Fail("cannot open results database '", path_,
         "' for writing: permission denied (it can still be opened read-only)");
  }
  sqlite3_extended_result_codes(db_, 1);
  sqlite3_busy_timeout(db_, options_.busy_timeout_ms);
  Exec("PRAGMA foreign_keys = ON", "enabling foreign keys");

  // Identify the file before changing anything in it.
  auto read_user_version = [&]() {
    OwnedStmt s(Prepare("PRAGMA user_version"));
    const int step_rc = sqlite3_step(s.get());
    if (step_rc != SQLITE_ROW) FailSqlite(step_rc, "reading the schema version");
    return static_cast<int>(sqlite3_column_int(s.get(), 0));
  };
  auto count_schema_objects = [&]() {
    OwnedStmt s(Prepare("SELECT count(*) FROM sqlite_schema"));
    const int step_rc = sqlite3_step(s.get());
    if (step_rc != SQLITE_ROW) FailSqlite(step_rc, "reading the schema");
    return ColInt(s.get(), 0);
  };
  auto check_format = [&]() {
    std::string format;
    const int rc = ReadFormatName(db_, &format);
    if (rc != SQLITE_OK) FailSqlite(rc, "reading the meta table");
    SPECBED_CHECK(format == kFormatName, "'", path_,
                  "' is a SQLite database but not a SpecBed results database (no meta row "
                  "format = '",
                  kFormatName, "'); pass a SpecBed results database or a path for a new one");
  };

  int version = read_user_version();
  if (version == 0) {
    SPECBED_CHECK(count_schema_objects() == 0, "'", path_,
                  "' is a SQLite database but not a SpecBed results database (it has tables "
                  "and schema version 0); pass a SpecBed results database or a path for a new "
                  "one");
    SPECBED_CHECK(!options_.read_only, "results database '", path_,
                  "' is empty (no SpecBed results schema)");
  } else {
    check_format();
    SPECBED_CHECK(version <= kResultsSchemaVersion, "results database '", path_,
                  "' has schema version ", version, ", newer than this build of specbed supports (",
                  kResultsSchemaVersion, "); use a newer specbed build or another results file");
    // A read-only open of an older version reads it as it is (see the Load*/List* queries).
  }

  if (!options_.read_only) {
    {
      // Two runs starting on a new database: retried for the busy timeout, not failed at once.
      OwnedStmt s(Prepare("PRAGMA journal_mode = WAL"));
      const int step_rc =
          StepRetryingWhileBusy(s.get(), op_start_us_ + options_.busy_timeout_ms * 1000LL);
      if (step_rc != SQLITE_ROW) FailSqlite(step_rc, "switching to WAL mode");
      const std::string mode = ColText(s.get(), 0);
      SPECBED_CHECK(mode == "wal", "results database '", path_,
                    "': could not switch to WAL journal mode (got '", mode, "')");
    }
    Exec("PRAGMA synchronous = NORMAL", "setting synchronous = NORMAL");
    Exec("PRAGMA cache_size = -65536", "setting the page cache size");
    if (version < kResultsSchemaVersion) {
      Begin("creating or migrating the schema");
      try {
        // Re-read inside the write transaction: another process may have done it meanwhile.
        version = read_user_version();
        SPECBED_CHECK(version <= kResultsSchemaVersion, "results database '", path_,
                      "' has schema version ", version,
                      ", newer than this build of specbed supports (", kResultsSchemaVersion,
                      "); use a newer specbed build or another results file");
        if (version == 0) {
          SPECBED_CHECK(count_schema_objects() == 0, "'", path_,
                        "' is a SQLite database but not a SpecBed results database");
          InitSchema();
        } else if (version < kResultsSchemaVersion) {
          MigrateSchema(version);
        }
        Commit("creating or migrating the schema");
      } catch (...) {
        RollbackQuietly();
        throw;
      }
      version = kResultsSchemaVersion;
    }
  }
  schema_version_ = version;
}

void ResultsStore::InitSchema() {
  Exec(kSchemaV1, "creating the schema");
  for (int v = 1; v < kResultsSchemaVersion; ++v) {
    Exec(MigrationSql(v).c_str(), StrCat("creating the schema (version ", v, " -> ", v + 1, ")"));
  }
  OwnedStmt s(Prepare("INSERT INTO meta(key, value) VALUES (?1, ?2)"));
  const std::vector<std::pair<std::string, std::string>> rows = {
      {"format", kFormatName},
      {"schema_version", std::to_string(kResultsSchemaVersion)},
      {"created_at", NowRfc3339()},
      {"created_with_sqlite", sqlite3_libversion()}};
  for (const auto& [key, value] : rows) {
    sqlite3_reset(s.get());
    sqlite3_bind_text(s.get(), 1, key.c_str(), -1, SQLITE_TRANSIENT);
    sqlite3_bind_text(s.get(), 2, value.c_str(), -1, SQLITE_TRANSIENT);
    const int rc = sqlite3_step(s.get());
    if (rc != SQLITE_DONE) FailSqlite(rc, "writing the meta table");
  }
  Exec(StrCat("PRAGMA user_version = ", kResultsSchemaVersion).c_str(),
       "setting the schema version");
}

// Migration hook: upgrades a database from `from_version` to kResultsSchemaVersion, one version
// at a time (kMigrations), inside the caller's write transaction. Add a kMigrations entry per
// schema change. Migrations may only add tables/columns/indexes: stored results are never
// rewritten.
void ResultsStore::MigrateSchema(int from_version) {
  SPECBED_CHECK(from_version >= 1, "results database '", path_, "' has schema version ",
                from_version, ", which this build of specbed cannot migrate to ",
                kResultsSchemaVersion);
  for (int v = from_version; v < kResultsSchemaVersion; ++v) {
    Exec(MigrationSql(v).c_str(),
         StrCat("migrating results database '", path_, "' from schema version ", v, " to ", v + 1));
  }
  Exec(StrCat("INSERT OR REPLACE INTO meta(key, value) VALUES ('schema_version', '",
              kResultsSchemaVersion, "')")
           .c_str(),
       "updating the meta table");
  Exec(StrCat("PRAGMA user_version = ", kResultsSchemaVersion).c_str(),
       "setting the schema version");
}

void ResultsStore::CheckWritable() const {
  SPECBED_CHECK(!options_.read_only, "results database '", path_,
                "' was opened read-only; cannot write to it");
}

void ResultsStore::Begin(const char* op) {
  op_start_us_ = NowMicros();
  // IMMEDIATE takes the write lock up front, so waiting for another writer goes through the busy
  // timeout instead of failing later on a read-to-write upgrade.
  Exec("BEGIN IMMEDIATE", op);
}

void ResultsStore::Commit(const char* op) {
  Exec("COMMIT", op);
}

void ResultsStore::RollbackQuietly() noexcept {
  if (db_ != nullptr && sqlite3_get_autocommit(db_) == 0) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
}

void ResultsStore::InTransaction(const char* op, const std::function<void()>& body) {
  Begin(op);
  try {
    body();
    Commit(op);
  } catch (...) {
    RollbackQuietly();
    throw;
  }
}

void ResultsStore::ForEachRow(sqlite3_stmt* s, const std::string& what,
                              const std::function<void(sqlite3_stmt*)>& row) const {
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) row(s);
  if (rc != SQLITE_DONE) FailSqlite(rc, what);
}

int64_t ResultsStore::BeginRun(const RunInfo& run) {
  CheckWritable();
  static const std::string kSql = InsertSql("runs", {}, RunFields());
  sqlite3_stmt* s = Cached(&insert_run_, kSql.c_str());
  int64_t run_id = 0;
  InTransaction("starting a run", [&] {
    ResetOnExit reset(s);
    BindFields(s, 1, run, RunFields());
    const int rc = sqlite3_step(s);
    if (rc != SQLITE_DONE) FailSqlite(rc, "writing the runs row");
    run_id = sqlite3_last_insert_rowid(db_);
  });
  return run_id;
}

bool ResultsStore::HasCompletedCase(const std::string& case_key) const {
  op_start_us_ = NowMicros();
  return FindCase(case_key) >= 0;
}

int64_t ResultsStore::WriteCase(int64_t run_id, const CaseRecord& c,
                                const std::vector<SampleRecord>& samples,
                                const std::vector<StepRecord>& steps) {
  CheckWritable();
  ValidateCase(c, samples, steps);  // before taking the write lock
  int64_t case_id = -1;
  InTransaction("writing a case", [&] {
    // Already completed (by an earlier run or a concurrent process)? Then write nothing.
    case_id = FindCase(c.case_key);
    if (case_id >= 0) return;
    CheckRunExists(run_id, StrCat("case '", c.case_key, "'"));
    case_id = InsertCase(run_id, c, samples.size(), steps.size());
    InsertSteps(case_id, c, steps, InsertSamples(case_id, c, samples));
  });
  return case_id;
}

void ResultsStore::ValidateCase(const CaseRecord& c, const std::vector<SampleRecord>& samples,
                                const std::vector<StepRecord>& steps) const {
  SPECBED_CHECK(!c.case_key.empty(), "results database '", path_,
                "': cannot write a case with an empty case_key (target '", c.target, "', method '",
                c.method, "')");
  SPECBED_CHECK(Contains(kDtypes, c.dtype), "results database '", path_, "': case '", c.case_key,
                "' has dtype '", c.dtype, "'; expected one of: ", Join(kDtypes, ", "));
  const bool cuda_n = c.device.size() > 5 && c.device.compare(0, 5, "cuda:") == 0 &&
                      c.device.find_first_not_of("0123456789", 5) == std::string::npos;
  SPECBED_CHECK(Contains(kDevices, c.device) || cuda_n, "results database '", path_, "': case '",
                c.case_key, "' has device '", c.device,
                "'; expected one of: ", Join(kDevices, ", "));
  SPECBED_CHECK(c.timing_mode.empty() || c.timing_mode == "paired" || c.timing_mode == "per_case",
                "results database '", path_, "': case '", c.case_key, "' has timing_mode '",
                c.timing_mode, "'; expected paired, per_case or empty");
  for (const SampleRecord& sample : samples) {
    SPECBED_CHECK(
        !sample.has_paired_ar() || sample.paired_ar_first == 0 || sample.paired_ar_first == 1,
        "results database '", path_, "': case '", c.case_key, "', prompt '", sample.prompt_id,
        "' turn ", sample.turn, " has paired_ar_first ", sample.paired_ar_first,
        "; expected 0 or 1 with a paired AR run");
    SPECBED_CHECK(!sample.prompt_id.empty(), "results database '", path_, "': case '", c.case_key,
                  "' has a sample with an empty prompt_id");
    SPECBED_CHECK(Contains(kStopReasons, sample.stop_reason), "results database '", path_,
                  "': case '", c.case_key, "', prompt '", sample.prompt_id, "' turn ", sample.turn,
                  " has stop_reason '", sample.stop_reason,
                  "'; expected one of: ", Join(kStopReasons, ", "));
  }
  for (size_t i = 0; i < steps.size(); ++i) {
    const StepRecord& st = steps[i];
    // The deepest node a step can accept: its recorded depth, or n_drafted (a chain) if unknown.
    const int64_t depth = st.draft_depth >= 0 ? st.draft_depth : st.n_drafted;
    const bool ok = st.n_drafted >= 0 && st.draft_depth >= -1 && st.draft_depth <= st.n_drafted &&
                    st.n_accepted >= 0 && st.n_accepted <= depth && st.n_emitted >= 0 &&
                    st.n_rollback_events >= 0;
    SPECBED_CHECK(ok, "results database '", path_, "': case '", c.case_key, "', step ", i,
                  " (prompt '", st.prompt_id, "' turn ", st.turn, ", step_idx ", st.step_idx,
                  ") has n_drafted ", st.n_drafted, ", draft_depth ", st.draft_depth,
                  ", n_accepted ", st.n_accepted, ", n_emitted ", st.n_emitted,
                  ", n_rollback_events ", st.n_rollback_events,
                  "; expected 0 <= n_accepted <= draft_depth <= n_drafted (draft_depth -1 = not "
                  "recorded, then n_accepted <= n_drafted) and n_emitted, n_rollback_events >= 0");
  }
}

int64_t ResultsStore::FindCase(const std::string& case_key) const {
  sqlite3_stmt* s = Cached(&find_case_, "SELECT case_id FROM cases WHERE case_key = ?1");
  ResetOnExit reset(s);
  BindText(s, 1, case_key);
  const int rc = sqlite3_step(s);
  if (rc == SQLITE_ROW) return ColInt(s, 0);
  if (rc != SQLITE_DONE) FailSqlite(rc, StrCat("looking up case '", case_key, "'"));
  return -1;
}

void ResultsStore::CheckRunExists(int64_t run_id, const std::string& what) const {
  sqlite3_stmt* s = Cached(&find_run_, "SELECT 1 FROM runs WHERE run_id = ?1");
  ResetOnExit reset(s);
  BindInt(s, 1, run_id);
  const int rc = sqlite3_step(s);
  if (rc == SQLITE_DONE) {
    Fail("results database '", path_, "': cannot write ", what, ": run_id ", run_id,
         " does not exist (call BeginRun first)");
  }
  if (rc != SQLITE_ROW) FailSqlite(rc, "looking up the run");
}

int64_t ResultsStore::InsertCase(int64_t run_id, const CaseRecord& c, size_t n_samples,
                                 size_t n_steps) {
  static const std::string kSql =
      InsertSql("cases", {"run_id", "n_samples", "n_steps", "completed_at"}, CaseFields());
  sqlite3_stmt* s = Cached(&insert_case_, kSql.c_str());
  ResetOnExit reset(s);
  const std::string completed = NowRfc3339();
  BindAll(s, 1, run_id, n_samples, n_steps, completed);
  BindFields(s, 5, c, CaseFields());
  const int rc = sqlite3_step(s);
  if (rc != SQLITE_DONE) FailSqlite(rc, StrCat("writing case '", c.case_key, "'"));
  return sqlite3_last_insert_rowid(db_);
}

std::map<std::pair<std::string, int32_t>, int64_t> ResultsStore::InsertSamples(
    int64_t case_id, const CaseRecord& c, const std::vector<SampleRecord>& samples) {
  static const std::string kSql = InsertSql("samples", {"case_id"}, SampleFields());
  sqlite3_stmt* s = Cached(&insert_sample_, kSql.c_str());
  std::map<std::pair<std::string, int32_t>, int64_t> sample_ids;
  for (const SampleRecord& sample : samples) {
    ResetOnExit reset(s);
    BindInt(s, 1, case_id);
    BindFields(s, 2, sample, SampleFields());
    const int rc = sqlite3_step(s);
    if ((rc & 0xff) == SQLITE_CONSTRAINT) {
      Fail("results database '", path_, "': case '", c.case_key, "' has two samples for prompt '",
           sample.prompt_id, "' turn ", sample.turn);
    }
    if (rc != SQLITE_DONE) {
      FailSqlite(rc, StrCat("writing sample '", sample.prompt_id, "' turn ", sample.turn,
                            " of case '", c.case_key, "'"));
    }
    sample_ids[{sample.prompt_id, sample.turn}] = sqlite3_last_insert_rowid(db_);
  }
  return sample_ids;
}

void ResultsStore::InsertSteps(
    int64_t case_id, const CaseRecord& c, const std::vector<StepRecord>& steps,
    const std::map<std::pair<std::string, int32_t>, int64_t>& sample_ids) {
  static const std::string kSql = InsertSql("steps", {"case_id", "sample_id"}, StepFields());
  sqlite3_stmt* s = Cached(&insert_step_, kSql.c_str());
  // Steps usually come grouped by sample: remember the last lookup.
  const std::pair<std::string, int32_t>* last_key = nullptr;
  int64_t sample_id = 0;
  for (size_t i = 0; i < steps.size(); ++i) {
    const StepRecord& step = steps[i];
    if (last_key == nullptr || last_key->second != step.turn || last_key->first != step.prompt_id) {
      auto it = sample_ids.find({step.prompt_id, step.turn});
      if (it == sample_ids.end()) {
        Fail("results database '", path_, "': case '", c.case_key, "', step ", i, " (step_idx ",
             step.step_idx, ") names prompt '", step.prompt_id, "' turn ", step.turn,
             ", which has no sample in the case");
      }
      last_key = &it->first;
      sample_id = it->second;
    }
    ResetOnExit reset(s);
    BindAll(s, 1, case_id, sample_id);
    BindFields(s, 3, step, StepFields());
    const int rc = sqlite3_step(s);
    if ((rc & 0xff) == SQLITE_CONSTRAINT) {
      Fail("results database '", path_, "': case '", c.case_key, "' has two steps with step_idx ",
           step.step_idx, " for prompt '", step.prompt_id, "' turn ", step.turn);
    }
    if (rc != SQLITE_DONE) {
      FailSqlite(rc, StrCat("writing step ", step.step_idx, " of prompt '", step.prompt_id,
                            "' in case '", c.case_key, "'"));
    }
  }
}

void ResultsStore::WriteRowsOfRun(int64_t run_id, const std::string& table,
                                  const std::function<void()>& write_rows) {
  CheckWritable();
  const std::string what = "writing " + table + " rows";
  InTransaction(what.c_str(), [&] {
    CheckRunExists(run_id, table + " rows");
    write_rows();
  });
}

template <typename R>
void ResultsStore::WriteRunRows(int64_t run_id, const char* table,
                                const std::vector<Field<R>>& fields, const std::vector<R>& rows) {
  OwnedStmt s(Prepare(InsertSql(table, {"run_id"}, fields).c_str()));
  WriteRowsOfRun(run_id, table, [&] {
    for (const R& r : rows) {
      ResetOnExit reset(s.get());
      BindInt(s.get(), 1, run_id);
      BindFields(s.get(), 2, r, fields);
      const int rc = sqlite3_step(s.get());
      if (rc != SQLITE_DONE) FailSqlite(rc, StrCat("writing a ", table, " row"));
    }
  });
}

void ResultsStore::WriteBench(int64_t run_id, const std::vector<BenchRecord>& rows) {
  WriteRunRows(run_id, "bench", BenchFields(), rows);
}

void ResultsStore::WriteBenchVerify(int64_t run_id, const std::vector<BenchVerifyRecord>& rows) {
  WriteRunRows(run_id, "bench_verify", BenchVerifyFields(), rows);
}

void ResultsStore::WriteBenchBandwidth(int64_t run_id,
                                       const std::vector<BenchBandwidthRecord>& rows) {
  WriteRunRows(run_id, "bench_bandwidth", BenchBandwidthFields(), rows);
}

std::vector<ResultsStore::CaseRow> ResultsStore::ListCases() const {
  op_start_us_ = NowMicros();
  OwnedStmt s(
      Prepare(StrCat("SELECT case_id, run_id, n_samples, (SELECT host || ' / ' || cpu || "
                     "' / ' || gpu FROM runs r WHERE r.run_id = cases.run_id), ",
                     ColumnList(CaseFields(), schema_version_), " FROM cases ORDER BY case_id")
                  .c_str()));
  std::vector<CaseRow> out;
  ForEachRow(s.get(), "listing cases", [&](sqlite3_stmt* q) {
    CaseRow row{};
    ReadAll(q, 0, row.case_id, row.run_id, row.n_samples, row.machine);
    ReadFields(q, 4, schema_version_, row.record, CaseFields());
    out.push_back(std::move(row));
  });
  return out;
}

void ResultsStore::QueryRows(const std::string& select, int64_t key, const std::string& what,
                             const std::function<void(sqlite3_stmt*)>& row) const {
  op_start_us_ = NowMicros();
  OwnedStmt s(Prepare(select.c_str()));
  BindInt(s.get(), 1, key);
  ForEachRow(s.get(), "loading " + what, row);
}

std::vector<SampleRecord> ResultsStore::LoadSamples(int64_t case_id) const {
  std::vector<SampleRecord> out;
  QueryRows(StrCat("SELECT ", ColumnList(SampleFields(), schema_version_),
                   " FROM samples WHERE case_id = ?1 ORDER BY sample_id"),
            case_id, StrCat("the samples of case ", case_id), [&](sqlite3_stmt* q) {
              out.push_back(ReadRecord(q, 0, schema_version_, SampleFields()));
            });
  return out;
}

std::vector<StepRecord> ResultsStore::LoadSteps(int64_t case_id) const {
  std::vector<StepRecord> out;
  QueryRows(StrCat("SELECT s.prompt_id, s.turn, ", ColumnList(StepFields(), schema_version_, "st."),
                   " FROM steps st JOIN samples s ON s.sample_id = st.sample_id WHERE "
                   "st.case_id = ?1 ORDER BY st.step_id"),
            case_id, StrCat("the steps of case ", case_id), [&](sqlite3_stmt* q) {
              StepRecord r = ReadRecord(q, 2, schema_version_, StepFields());
              ReadAll(q, 0, r.prompt_id, r.turn);
              out.push_back(std::move(r));
            });
  return out;
}

template <typename R>
std::vector<R> ResultsStore::LoadKeyedRows(const char* table, const char* key_column,
                                           const char* order_column,
                                           const std::vector<Field<R>>& fields, int table_since,
                                           int64_t key) const {
  std::vector<R> out;
  if (schema_version_ < table_since) return out;
  QueryRows(StrCat("SELECT ", ColumnList(fields, schema_version_), " FROM ", table,
                   " WHERE ?1 < 0 OR ", key_column, " = ?1 ORDER BY ", order_column),
            key, StrCat(table, " rows"),
            [&](sqlite3_stmt* q) { out.push_back(ReadRecord(q, 0, schema_version_, fields)); });
  return out;
}
template std::vector<TrainLogRow> ResultsStore::LoadKeyedRows(
    const char*, const char*, const char*, const std::vector<Field<TrainLogRow>>&, int,
    int64_t) const;
template std::vector<TrainEvalRow> ResultsStore::LoadKeyedRows(
    const char*, const char*, const char*, const std::vector<Field<TrainEvalRow>>&, int,
    int64_t) const;

std::vector<BenchRecord> ResultsStore::LoadBench(int64_t run_id) const {
  return LoadKeyedRows("bench", "run_id", "bench_id", BenchFields(), 1, run_id);
}

std::vector<BenchVerifyRecord> ResultsStore::LoadBenchVerify(int64_t run_id) const {
  return LoadKeyedRows("bench_verify", "run_id", "bench_verify_id", BenchVerifyFields(), 5, run_id);
}

std::vector<BenchBandwidthRecord> ResultsStore::LoadBenchBandwidth(int64_t run_id) const {
  return LoadKeyedRows("bench_bandwidth", "run_id", "bandwidth_id", BenchBandwidthFields(), 5,
                       run_id);
}

int64_t ResultsStore::CountRows(const std::string& table) const {
  if (!Contains(kTables, table)) FailUnknownName("results table", table, kTables);
  op_start_us_ = NowMicros();
  OwnedStmt s(Prepare(StrCat("SELECT count(*) FROM ", table).c_str()));
  const int rc = sqlite3_step(s.get());
  if (rc != SQLITE_ROW) FailSqlite(rc, StrCat("counting rows of ", table));
  return ColInt(s.get(), 0);
}

std::vector<ResultsStore::RunRow> ResultsStore::ListRuns() const {
  op_start_us_ = NowMicros();
  OwnedStmt s(Prepare(StrCat("SELECT run_id, ", ColumnList(RunFields(), schema_version_),
                             " FROM runs ORDER BY run_id")
                          .c_str()));
  std::vector<RunRow> out;
  ForEachRow(s.get(), "listing runs", [&](sqlite3_stmt* q) {
    RunRow r;
    r.run_id = ColInt(q, 0);
    ReadFields(q, 1, schema_version_, r.info, RunFields());
    out.push_back(std::move(r));
  });
  return out;
}

std::vector<int64_t> ResultsStore::ListRunIds() const {
  op_start_us_ = NowMicros();
  OwnedStmt s(Prepare("SELECT run_id FROM runs ORDER BY run_id"));
  std::vector<int64_t> out;
  ForEachRow(s.get(), "listing runs", [&](sqlite3_stmt* q) { out.push_back(ColInt(q, 0)); });
  return out;
}

}  // namespace specbed
