// The one record schema (results/record_schema.h) against everything built from it or documented
// beside it: every field is a column of its table with its SQL type (and every column a field or
// a named key), every field is documented in results/README.md with its type and the version
// that added it, every earlier schema version opens read-only and read-write and reads back what
// it held (later fields as "not recorded"), and the generated column migrations are consistent.
// The export side (every sample/step field exported) is checked in tests/reports/export_test.cpp.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "results/record_schema.h"
#include "results/store.h"
#include "tests/common/test_util.h"

namespace specbed {
namespace {

using testing::ErrorOf;

// (name, declared type, notnull) of every column of `table`.
struct Column {
  std::string name, type;
  bool not_null;
};
std::vector<Column> TableColumns(sqlite3* db, const std::string& table) {
  std::vector<Column> out;
  sqlite3_stmt* s = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(db, ("PRAGMA table_info(" + table + ")").c_str(), -1, &s, nullptr),
            SQLITE_OK);
  while (sqlite3_step(s) == SQLITE_ROW) {
    out.push_back({reinterpret_cast<const char*>(sqlite3_column_text(s, 1)),
                   reinterpret_cast<const char*>(sqlite3_column_text(s, 2)),
                   sqlite3_column_int(s, 3) != 0});
  }
  sqlite3_finalize(s);
  return out;
}

TEST(RecordSchema, EveryFieldIsAColumnOfItsTableAndEveryColumnAField) {
  const std::string path = testing::ScratchDb("schema_columns");
  ResultsStore::Open(path);
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  int n_fields = 0;
  ForEachRecordTable([&](const TableInfo& t, const auto& fields) {
    std::set<std::string> expected(t.other_columns.begin(), t.other_columns.end());
    for (const auto& f : fields) {
      EXPECT_TRUE(expected.insert(f.name).second) << t.table << "." << f.name << " listed twice";
      EXPECT_LE(f.since, kResultsSchemaVersion) << t.table << "." << f.name;
      EXPECT_GE(f.since, t.since) << t.table << "." << f.name;
      ++n_fields;
    }
    std::set<std::string> actual;
    for (const Column& c : TableColumns(db, t.table)) {
      actual.insert(c.name);
      for (const auto& f : fields) {
        if (c.name != f.name) continue;
        EXPECT_EQ(c.type, SqlType(f)) << t.table << "." << f.name;
        if (f.not_recorded == NotRecorded::kNull) {
          EXPECT_FALSE(c.not_null) << t.table << "." << f.name << " stores NULL when not recorded";
        }
      }
    }
    EXPECT_EQ(actual, expected) << "table " << t.table
                                << ": columns and results/record_schema.cpp disagree";
  });
  sqlite3_close(db);
  EXPECT_GT(n_fields, 100);
}

// The README section of `table`: from "`table` — " to the end of the first column table after it.
std::string ReadmeSection(const std::string& readme, const std::string& table) {
  const size_t start = readme.find("`" + table + "` — ");
  if (start == std::string::npos) return "";
  const size_t columns = readme.find("| column |", start);
  const size_t end = columns == std::string::npos ? columns : readme.find("\n\n", columns);
  return readme.substr(start, end == std::string::npos ? end : end - start);
}

TEST(RecordSchema, EveryFieldIsDocumentedWithItsTypeAndVersion) {
  std::ifstream in(std::string(SPECBED_SOURCE_DIR) + "/results/README.md");
  ASSERT_TRUE(in) << "results/README.md missing";
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string readme = buffer.str();
  ForEachRecordTable([&](const TableInfo& t, const auto& fields) {
    const std::string section = ReadmeSection(readme, t.table);
    ASSERT_FALSE(section.empty()) << "results/README.md has no section \"`" << t.table << "` — \"";
    for (const auto& f : fields) {
      const std::string row = StrCat("| `", f.name, "` | ", SqlType(f));
      const size_t at = section.find(row);
      EXPECT_NE(at, std::string::npos)
          << "results/README.md, table " << t.table << ": no row \"" << row << "\"";
      if (at == std::string::npos || f.since <= t.since) continue;
      const std::string line = section.substr(at, section.find('\n', at) - at);
      EXPECT_NE(line.find(StrCat("*(v", f.since, ")*")), std::string::npos)
          << t.table << "." << f.name << " is documented without its version *(v" << f.since
          << ")*";
    }
  });
}

// A record with a distinct non-default value in every field (strings "name#i", integers 100 + i,
// reals i + 0.25, the seed above int64's range).
template <typename R>
R Filled(const std::vector<Field<R>>& fields) {
  R r{};
  int i = 0;
  for (const Field<R>& f : fields) {
    VisitField(r, f, [&](auto& v) {
      using V = std::decay_t<decltype(v)>;
      if constexpr (std::is_same_v<V, std::string>) {
        v = StrCat(f.name, "#", i);
      } else if constexpr (std::is_same_v<V, uint64_t>) {
        v = (uint64_t{1} << 63) + static_cast<uint64_t>(i);
      } else if constexpr (std::is_floating_point_v<V>) {
        v = i + 0.25;
      } else {
        v = static_cast<V>(100 + i);
      }
    });
    ++i;
  }
  return r;
}

template <typename R>
std::string SqlLiteral(const R& r, const Field<R>& f) {
  std::string out;
  VisitField(r, f, [&](const auto& v) {
    using V = std::decay_t<decltype(v)>;
    if constexpr (std::is_same_v<V, std::string>) {
      out = "'" + v + "'";
    } else if constexpr (std::is_same_v<V, uint64_t>) {
      out = std::to_string(static_cast<int64_t>(v));  // stored bit-cast
    } else {
      out = StrCat(v);
    }
  });
  return out;
}

// INSERT of `r` into `table` with the key columns `keys` (name = value) and the fields a file of
// schema `version` has.
template <typename R>
std::string InsertAtVersion(const std::string& table, const std::string& keys,
                            const std::string& key_values, const R& r,
                            const std::vector<Field<R>>& fields, int version) {
  std::string columns = keys, values = key_values;
  for (const Field<R>& f : fields) {
    if (f.since > version) continue;
    columns += StrCat(columns.empty() ? "" : ", ", f.name);
    values += StrCat(values.empty() ? "" : ", ", SqlLiteral(r, f));
  }
  return StrCat("INSERT INTO ", table, "(", columns, ") VALUES (", values, ");\n");
}

// Every field of `got` equals `filled` where the file had it, else the record's default.
template <typename R>
void ExpectReadBack(const R& got, const R& filled, const std::vector<Field<R>>& fields, int version,
                    const std::string& what) {
  const R fresh{};
  for (const Field<R>& f : fields) {
    const R& want = f.since <= version ? filled : fresh;
    std::string got_text, want_text;
    VisitField(got, f, [&](const auto& v) { got_text = StrCat(v); });
    VisitField(want, f, [&](const auto& v) { want_text = StrCat(v); });
    EXPECT_EQ(got_text, want_text) << what << " (schema v" << version << "): field " << f.name;
  }
}

// Writes one row per table that schema `version` has, exactly as that version's columns allow.
void WriteRowsAtVersion(const std::string& path, int version) {
  std::string sql = "BEGIN;\n";
  sql += InsertAtVersion("runs", "run_id", "1", Filled(RunFields()), RunFields(), version);
  sql += InsertAtVersion("cases", "case_id, run_id, n_samples, n_steps, completed_at",
                         "1, 1, 1, 1, 'now'", Filled(CaseFields()), CaseFields(), version);
  sql += InsertAtVersion("samples", "sample_id, case_id", "1, 1", Filled(SampleFields()),
                         SampleFields(), version);
  sql += InsertAtVersion("steps", "step_id, case_id, sample_id", "1, 1, 1", Filled(StepFields()),
                         StepFields(), version);
  sql += InsertAtVersion("bench", "run_id", "1", Filled(BenchFields()), BenchFields(), version);
  if (version >= 5) {
    sql += InsertAtVersion("bench_verify", "run_id", "1", Filled(BenchVerifyFields()),
                           BenchVerifyFields(), version);
    sql += InsertAtVersion("bench_bandwidth", "run_id", "1", Filled(BenchBandwidthFields()),
                           BenchBandwidthFields(), version);
  }
  if (version >= 3) {
    sql += InsertAtVersion("train_runs", "train_id", "1", Filled(TrainRunFields()),
                           TrainRunFields(), version);
    sql += InsertAtVersion("train_log", "train_id", "1", Filled(TrainLogFields()), TrainLogFields(),
                           version);
    sql += InsertAtVersion("train_eval", "train_id", "1", Filled(TrainEvalFields()),
                           TrainEvalFields(), version);
  }
  if (version >= 14) {
    sql += InsertAtVersion("serve_cells", "cell_id, run_id, completed_at", "1, 1, 'now'",
                           Filled(ServeCellFields()), ServeCellFields(), version);
    sql += InsertAtVersion("serve_requests", "cell_id", "1", Filled(ServeRequestFields()),
                           ServeRequestFields(), version);
    sql += InsertAtVersion("serve_steps", "cell_id", "1", Filled(ServeStepFields()),
                           ServeStepFields(), version);
  }
  sql += "COMMIT;\n";
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error), SQLITE_OK)
      << (error ? error : "") << "\n"
      << sql;
  sqlite3_free(error);
  sqlite3_close(db);
}

// What a store reads back from a file written at `version`.
void ExpectStoreReadsVersion(const ResultsStore& store, int version, const std::string& how) {
  const std::string what = "v" + std::to_string(version) + " file opened " + how;
  ASSERT_EQ(store.ListRuns().size(), 1u) << what;
  ExpectReadBack(store.ListRuns()[0].info, Filled(RunFields()), RunFields(), version, what);
  ASSERT_EQ(store.ListCases().size(), 1u) << what;
  ExpectReadBack(store.ListCases()[0].record, Filled(CaseFields()), CaseFields(), version, what);
  ASSERT_EQ(store.LoadSamples(1).size(), 1u) << what;
  ExpectReadBack(store.LoadSamples(1)[0], Filled(SampleFields()), SampleFields(), version, what);
  ASSERT_EQ(store.LoadSteps(1).size(), 1u) << what;
  ExpectReadBack(store.LoadSteps(1)[0], Filled(StepFields()), StepFields(), version, what);
  ASSERT_EQ(store.LoadBench().size(), 1u) << what;
  ExpectReadBack(store.LoadBench()[0], Filled(BenchFields()), BenchFields(), version, what);
  ASSERT_EQ(store.LoadBenchVerify().size(), version >= 5 ? 1u : 0u) << what;
  ASSERT_EQ(store.LoadBenchBandwidth().size(), version >= 5 ? 1u : 0u) << what;
  if (version >= 5) {
    ExpectReadBack(store.LoadBenchVerify()[0], Filled(BenchVerifyFields()), BenchVerifyFields(),
                   version, what);
    ExpectReadBack(store.LoadBenchBandwidth()[0], Filled(BenchBandwidthFields()),
                   BenchBandwidthFields(), version, what);
  }
  ASSERT_EQ(store.ListTrainRuns().size(), version >= 3 ? 1u : 0u) << what;
  if (version >= 3) {
    ExpectReadBack(store.ListTrainRuns()[0].record, Filled(TrainRunFields()), TrainRunFields(),
                   version, what);
    ExpectReadBack(store.LoadTrainLog(1).at(0), Filled(TrainLogFields()), TrainLogFields(), version,
                   what);
    ExpectReadBack(store.LoadTrainEval(1).at(0), Filled(TrainEvalFields()), TrainEvalFields(),
                   version, what);
  }
}

// Every earlier schema version, laid out as it was, opens read-only (read as it is) and
// read-write (migrated to the current version), and reads back every field it had; the fields
// added later read back as "not recorded".
TEST(RecordSchema, EveryEarlierVersionOpensAndReadsBackWhatItHeld) {
  for (int version = 1; version <= kResultsSchemaVersion; ++version) {
    SCOPED_TRACE("schema version " + std::to_string(version));
    const std::string path = testing::ScratchDb("schema_v" + std::to_string(version));
    CreateResultsDatabaseAtVersion(path, version);
    WriteRowsAtVersion(path, version);
    StoreOptions read_only;
    read_only.read_only = true;
    {
      auto store = ResultsStore::Open(path, read_only);
      EXPECT_EQ(store->schema_version(), version);
      ExpectStoreReadsVersion(*store, version, "read-only");
    }
    auto store = ResultsStore::Open(path);
    EXPECT_EQ(store->schema_version(), kResultsSchemaVersion);
    ExpectStoreReadsVersion(*store, version, "read-write (migrated)");
  }
}

// The control for the test above: a store that returned a value for a field the file did not
// have (or read a field from the wrong column) fails the read-back check, naming the field.
TEST(RecordSchema, ReadBackCheckCatchesAFieldTheFileDidNotHave) {
  // A v11 bench_verify row as a v5 file would hold it: gemv_kernel (v11) must read as not recorded.
  const BenchVerifyRecord v11_row = Filled(BenchVerifyFields());
  EXPECT_NONFATAL_FAILURE(ExpectReadBack(v11_row, v11_row, BenchVerifyFields(), 5, "control"),
                          "field gemv_kernel");
  BenchVerifyRecord shifted = v11_row;  // reps read from n_query's column
  shifted.reps = v11_row.n_query;
  EXPECT_NONFATAL_FAILURE(ExpectReadBack(shifted, v11_row, BenchVerifyFields(), 11, "control"),
                          "field reps");
  EXPECT_CONTAINS(ErrorOf([] { CreateResultsDatabaseAtVersion("unused.db", 0); }),
                  "cannot create schema version 0");
}

TEST(RecordSchema, ColumnMigrationsAreGeneratedFromTheFieldTables) {
  // Versions up to kFirstGeneratedVersion - 1 keep their hand-written SQL.
  EXPECT_CONTAINS(ErrorOf([] { AddedColumnsSql(kFirstGeneratedVersion - 1); }),
                  "hand-written migrations");
  EXPECT_CONTAINS(ErrorOf([] { CreatedTablesSql(kFirstGeneratedVersion - 1); }),
                  "hand-written migrations");
  // Version 14 creates the serve tables (with their keys, indexes and append-only triggers) and
  // adds no column to them or to any other table; version 13 creates none.
  const std::string v14 = GeneratedMigrationSql(14);
  for (const char* table : {"serve_cells", "serve_requests", "serve_steps"}) {
    EXPECT_CONTAINS(v14, StrCat("CREATE TABLE ", table, " ("));
    EXPECT_CONTAINS(v14, StrCat("CREATE TRIGGER ", table, "_no_update"));
    EXPECT_CONTAINS(v14, StrCat("CREATE TRIGGER ", table, "_no_delete"));
  }
  EXPECT_CONTAINS(v14, "CREATE UNIQUE INDEX serve_cells_by_key ON serve_cells(cell_key)");
  EXPECT_EQ(AddedColumnsSql(14), "");
  EXPECT_EQ(CreatedTablesSql(13), "");
  EXPECT_CONTAINS(GeneratedMigrationSql(13), "ALTER TABLE bench ADD COLUMN test TEXT");
  // No field is newer than the build's schema version, so the next one adds nothing yet.
  EXPECT_EQ(AddedColumnsSql(std::max(kResultsSchemaVersion + 1, kFirstGeneratedVersion)), "");
}

}  // namespace
}  // namespace specbed
