// SQLite row helpers shared by the results store's files (store.cpp, store_train.cpp): statement
// ownership and reset, column reads, parameter binding, and the field tables of record_schema.h as
// SQL (column lists, INSERTs, binding and reading one record). Internal to results/.
// Checked by: tests/results/store_test.cpp, tests/results/record_schema_test.cpp.
#pragma once

#include <sqlite3.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "base/error.h"
#include "base/names.h"
#include "results/record_schema.h"

namespace specbed::sql_rows {

// Resets a statement when the scope ends, so that no statement keeps a read transaction open.
class ResetOnExit {
 public:
  explicit ResetOnExit(sqlite3_stmt* stmt) : stmt_(stmt) {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  ~ResetOnExit() { sqlite3_reset(stmt_); }
  ResetOnExit(const ResetOnExit&) = delete;
  ResetOnExit& operator=(const ResetOnExit&) = delete;

 private:
  sqlite3_stmt* stmt_;
};

// Owns a statement that is used once.
class OwnedStmt {
 public:
  explicit OwnedStmt(sqlite3_stmt* stmt) : stmt_(stmt) {}
  ~OwnedStmt() { sqlite3_finalize(stmt_); }
  OwnedStmt(const OwnedStmt&) = delete;
  OwnedStmt& operator=(const OwnedStmt&) = delete;
  sqlite3_stmt* get() const { return stmt_; }

 private:
  sqlite3_stmt* stmt_;
};

inline std::string ColText(sqlite3_stmt* s, int i) {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s, i));
  const int n = sqlite3_column_bytes(s, i);
  return p ? std::string(p, static_cast<size_t>(n)) : std::string();
}

inline double ColReal(sqlite3_stmt* s, int i) {
  if (sqlite3_column_type(s, i) == SQLITE_NULL) return std::numeric_limits<double>::quiet_NaN();
  return sqlite3_column_double(s, i);
}

inline int64_t ColInt(sqlite3_stmt* s, int i) {
  return sqlite3_column_int64(s, i);
}

// Binding helpers; all strings are bound without copying (they outlive the step).
inline void BindText(sqlite3_stmt* s, int i, const std::string& v) {
  sqlite3_bind_text64(s, i, v.data(), v.size(), SQLITE_STATIC, SQLITE_UTF8);
}
inline void BindInt(sqlite3_stmt* s, int i, int64_t v) {
  sqlite3_bind_int64(s, i, v);
}
inline void BindReal(sqlite3_stmt* s, int i, double v) {
  if (std::isnan(v)) {
    sqlite3_bind_null(s, i);
  } else {
    sqlite3_bind_double(s, i, v);
  }
}

// Binds `values` to parameters first, first + 1, ... in order: integers as INTEGER, floating
// point as REAL (NaN as NULL), strings as TEXT (not copied).
template <typename... T>
void BindAll(sqlite3_stmt* s, int first, const T&... values) {
  int i = first;
  auto bind = [&](const auto& v) {
    using V = std::decay_t<decltype(v)>;
    if constexpr (std::is_integral_v<V>) {
      BindInt(s, i++, static_cast<int64_t>(v));
    } else if constexpr (std::is_floating_point_v<V>) {
      BindReal(s, i++, static_cast<double>(v));
    } else {
      BindText(s, i++, v);
    }
  };
  (bind(values), ...);
}

// Reads columns first, first + 1, ... into `fields` in order: integers as INTEGER, floating
// point as REAL (NULL as NaN), strings as TEXT.
template <typename... T>
void ReadAll(sqlite3_stmt* s, int first, T&... fields) {
  int i = first;
  auto read = [&](auto& field) {
    using V = std::decay_t<decltype(field)>;
    if constexpr (std::is_integral_v<V>) {
      field = static_cast<V>(ColInt(s, i++));
    } else if constexpr (std::is_floating_point_v<V>) {
      field = static_cast<V>(ColReal(s, i++));
    } else {
      field = ColText(s, i++);
    }
  };
  (read(fields), ...);
}

inline int64_t SeedToInt(uint64_t seed) {
  int64_t out;
  std::memcpy(&out, &seed, sizeof(out));
  return out;
}
inline uint64_t IntToSeed(int64_t v) {
  uint64_t out;
  std::memcpy(&out, &v, sizeof(out));
  return out;
}

// The field tables (record_schema.h) as SQL: the columns a file of schema `version` has, an
// INSERT of `lead` columns then every field, and the binding / reading of one record.
template <typename R>
std::string ColumnList(const std::vector<Field<R>>& fields, int version, const char* prefix = "") {
  std::string out;
  for (const Field<R>& f : fields) {
    if (f.since <= version) out += StrCat(out.empty() ? "" : ", ", prefix, f.name);
  }
  return out;
}

template <typename R>
std::string InsertSql(const char* table, const std::vector<std::string>& lead,
                      const std::vector<Field<R>>& fields) {
  std::string columns = Join(lead, ", ");
  std::string params;
  const size_t n = lead.size() + fields.size();
  for (size_t i = 1; i <= n; ++i) params += StrCat(i > 1 ? ", ?" : "?", i);
  const std::string rest = ColumnList(fields, kResultsSchemaVersion);
  return StrCat("INSERT INTO ", table, "(", columns, columns.empty() ? "" : ", ", rest,
                ") VALUES (", params, ")");
}

// Binds every field of `r` from parameter `first` on: strings as TEXT (not copied), integers as
// INTEGER (a seed bit-cast; "not recorded" as NULL for kNull fields), reals as REAL (NaN = NULL).
template <typename R>
void BindFields(sqlite3_stmt* s, int first, const R& r, const std::vector<Field<R>>& fields) {
  int i = first;
  for (const Field<R>& f : fields) {
    VisitField(r, f, [&](const auto& v) {
      using V = std::decay_t<decltype(v)>;
      if constexpr (std::is_same_v<V, std::string>) {
        BindText(s, i, v);
      } else if constexpr (std::is_same_v<V, uint64_t>) {
        BindInt(s, i, SeedToInt(v));
      } else if constexpr (std::is_floating_point_v<V>) {
        BindReal(s, i, v);
      } else if (f.not_recorded == NotRecorded::kNull && v < 0) {
        sqlite3_bind_null(s, i);
      } else {
        BindInt(s, i, v);
      }
    });
    ++i;
  }
}

// Reads the fields a file of schema `version` has from column `first` on (ColumnList's order);
// the others keep the record's defaults (their "not recorded" values).
template <typename R>
void ReadFields(sqlite3_stmt* s, int first, int version, R& r, const std::vector<Field<R>>& fields);

// A record read through `fields` from column `first` on (ReadFields into a default R).
template <typename R>
R ReadRecord(sqlite3_stmt* s, int first, int version, const std::vector<Field<R>>& fields) {
  R r;
  ReadFields(s, first, version, r, fields);
  return r;
}

template <typename R>
void ReadFields(sqlite3_stmt* s, int first, int version, R& r,
                const std::vector<Field<R>>& fields) {
  int i = first;
  for (const Field<R>& f : fields) {
    if (f.since > version) continue;
    VisitField(r, f, [&](auto& v) {
      using V = std::decay_t<decltype(v)>;
      if constexpr (std::is_same_v<V, std::string>) {
        v = ColText(s, i);
      } else if constexpr (std::is_same_v<V, uint64_t>) {
        v = IntToSeed(ColInt(s, i));
      } else if constexpr (std::is_floating_point_v<V>) {
        v = ColReal(s, i);
      } else {
        v = sqlite3_column_type(s, i) == SQLITE_NULL ? V{-1} : static_cast<V>(ColInt(s, i));
      }
    });
    ++i;
  }
}

}  // namespace specbed::sql_rows
